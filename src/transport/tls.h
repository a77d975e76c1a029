/* tls.h - the TLS layer: OpenSSL 3 over a BIO that works on the stack's buffers, one sans-io implementation for client and server. */
#ifndef ETM_TRANSPORT_TLS_H
#define ETM_TRANSPORT_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/layer.h"

/* Two objects, as OpenSSL splits them:
 *
 *   a context (tls_client_ctx, tls_server_ctx) holds the SSL_CTX: the
 *   settings, the trust store, the certificate and key. It is built once
 *   per outbound or inbound, on the control thread, and is then read-only:
 *   many layers on many worker threads share it. It is refcounted; every
 *   layer holds a reference, so the builder may drop its own at any time.
 *
 *   a layer (tls_client_new, tls_server_new) is one connection's SSL
 *   object; it follows layer.h. Its ops name is "tls".
 *
 * Sans-io: the layer reads and writes only the buffers it is given. OpenSSL
 * draws its own randomness (it is the crypto library); the layer reads no
 * clock, so certificate validity is checked against OpenSSL's notion of
 * now, as every OpenSSL user does.
 *
 * End of stream. A close_notify from the peer ends its half of the app
 * stream: from_below delivers everything before it, then consumes and
 * drops whatever follows (the TCP FIN should), and ready() stays true; it
 * is not an error. The shell learns EOF from the socket as for plain TCP;
 * tls_peer_closed() then says whether the end was clean (close_notify
 * seen) or a truncation, for its log. A close_notify during the handshake
 * is LAYER_ERR_CLOSED: a reply was still expected.
 *
 * Errors. A failure that makes OpenSSL write an alert (bad certificate,
 * no shared cipher) is returned once that alert has been handed to down,
 * so the peer learns why; error() gives the text from the table in tls.c,
 * asserted word for word by tests/unit/test_tls.c:
 *   LAYER_ERR_AUTH   "tls: certificate verify failed: <X509 reason>"
 *   LAYER_ERR_PROTO  "tls: handshake failed: <OpenSSL reason>"
 *                    "tls: connection failed: <OpenSSL reason>" (after the handshake)
 *   LAYER_ERR_CLOSED "tls: peer closed during the handshake"
 *   LAYER_ERR_STATE  "tls: send after shutdown"
 *   LAYER_ERR_NOMEM  "tls: out of memory" */

/* Versions a client may be held to; TLS 1.0 and 1.1 are never offered. */
typedef enum tls_version {
	TLS_VERSION_ANY = 0, /* 1.2 and 1.3 */
	TLS_VERSION_12,
	TLS_VERSION_13,
} tls_version;

/* ALPN lists are NULL-terminated arrays of protocol names ("h2",
 * "http/1.1"), most preferred first. Each name is 1..255 bytes (RFC 7301
 * section 3.1); the encoded list is bounded by TLS_ALPN_WIRE_MAX. */
#define TLS_ALPN_WIRE_MAX 256

typedef struct tls_client_config {
	/* The name sent as SNI and checked against the certificate (RFC 6125
	 * rules, no partial wildcards). An IP address is checked against the
	 * certificate's IP SANs and not sent (RFC 6066 section 3 allows only
	 * host names in SNI). NULL: each tls_client_new must give one, unless
	 * allow_insecure. Borrowed for the call. */
	const char *server_name;
	const char *const *alpn; /* NULL: no ALPN; borrowed for the call */
	bool allow_insecure;     /* no certificate or name verification at all */
	/* PEM file of trusted certificates; it replaces the system store (a
	 * self-signed certificate listed here is trusted as it is). NULL: the
	 * system store (SSL_CTX_set_default_verify_paths). Read by
	 * tls_client_ctx_new, not kept. */
	const char *ca_file;
	tls_version min_version, max_version; /* TLS_VERSION_ANY: no bound */
} tls_client_config;

typedef struct tls_client_ctx tls_client_ctx;
typedef struct tls_server_ctx tls_server_ctx;

/* Builds a client context. Returns it with one reference, or NULL with the
 * reason in err[0, err_size) (always NUL-terminated when err_size > 0):
 *   "tls: cannot read CA file <path>: <reason>"
 *   "tls: bad ALPN list"
 *   "tls: bad version range"
 *   "tls: out of memory" */
__attribute__((warn_unused_result)) tls_client_ctx *
tls_client_ctx_new(const tls_client_config *cfg, char *err, size_t err_size);
void tls_client_ctx_ref(tls_client_ctx *c);
/* Drops a reference; the last one frees the context. NULL is a no-op. */
void tls_client_ctx_unref(tls_client_ctx *c);

/* Builds a server context from a PEM certificate chain (leaf first) and a
 * PEM private key. alpn, NULL or a list in the server's order of
 * preference: the first of them the client also offers is selected, and a
 * client offering none of them goes on without ALPN. Returns it with one
 * reference, or NULL with the reason in err:
 *   "tls: cannot read certificate <path>: <reason>"
 *   "tls: cannot read key <path>: <reason>"
 *   "tls: key does not match certificate"
 *   "tls: bad ALPN list"
 *   "tls: out of memory" */
__attribute__((warn_unused_result)) tls_server_ctx *
tls_server_ctx_new(const char *cert_file, const char *key_file, const char *const *alpn,
                   char *err, size_t err_size);
void tls_server_ctx_ref(tls_server_ctx *c);
void tls_server_ctx_unref(tls_server_ctx *c);

/* A client layer: start() writes the ClientHello. server_name overrides
 * the context's (NULL: the context's; an outbound without a configured
 * name passes the address it dials). Takes a reference on ctx. Returns
 * NULL with the reason in err:
 *   "tls: no server name to verify" (verifying, and no name anywhere)
 *   "tls: out of memory" */
__attribute__((warn_unused_result)) layer *tls_client_new(tls_client_ctx *ctx,
                                                          const char *server_name, char *err,
                                                          size_t err_size);

/* A server layer: waits for the ClientHello. Takes a reference on ctx.
 * Returns NULL with "tls: out of memory" in err. */
__attribute__((warn_unused_result)) layer *tls_server_new(tls_server_ctx *ctx, char *err,
                                                          size_t err_size);

/* Queries, valid on a layer made by this module (anything else answers
 * NULL / 0 / false). */

/* The ALPN protocol agreed, not NUL-terminated: its length (0: none, or
 * not yet), with *proto pointing at it until the layer is freed. */
size_t tls_alpn(const layer *l, const uint8_t **proto);

/* Server: the SNI host name the client sent (NULL: none, or not yet).
 * Client: the name it sent. Valid until the layer is freed. */
const char *tls_server_name(const layer *l);

/* "TLSv1.2" or "TLSv1.3" once ready; NULL before. */
const char *tls_version_name(const layer *l);

/* Whether the peer's close_notify has arrived (see "End of stream"). */
bool tls_peer_closed(const layer *l);

/* Whether the handshake resumed an earlier session: a client context keeps
 * the last session its server gave and offers it on the next connection to
 * the same name. */
bool tls_resumed(const layer *l);

/* The process's completed handshakes, by side and resumption
 * (etemenanki/supervisor.h's etm_tls_handshakes reads them). */
void tls_handshake_counts(uint64_t client[2], uint64_t server[2]);

#endif
