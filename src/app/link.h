/* link.h - share links (vless://, vmess://, trojan://, ss://, hysteria2://) to and from the config: no socket, no clock (link_check builds the outbound as --test does). */
#ifndef ETM_APP_LINK_H
#define ETM_APP_LINK_H

#include <stddef.h>

#include "etemenanki/spec.h"

/* The formats, and which field maps to which key, are in docs/links.md.
 * Everything here works on memory the caller gives: nothing reads a file,
 * a socket or a clock, so the unit tests and the fuzz target drive it
 * whole. */

/* Longest link taken, in bytes. Real links are a few hundred bytes; the
 * bound keeps every decoded field, and the TOML printed from it, small
 * (LINK_TOML_MAX). */
#define LINK_MAX 8192

/* Room enough for the TOML of any link up to LINK_MAX: every byte of it
 * escaped as \u00XX (6 bytes) plus the fixed keys. */
#define LINK_TOML_MAX (6 * LINK_MAX + 1024)

/* Longest piece of the input an error message quotes (a scheme, a method,
 * a port); longer ones are cut, so a message stays one short line. */
#define LINK_DETAIL_MAX 64

/* Room for a link_error's text: a quoted piece (LINK_DETAIL_MAX), or the
 * message of the config's checks (link_check), which is at most
 * CONFIG_MSG_MAX (app/config.h; link_check.c asserts they agree). */
#define LINK_TEXT_MAX 1024

/* Room for the line link_error_format writes: the text and the longest
 * message of the table around it. */
#define LINK_LINE_MAX (LINK_TEXT_MAX + 128)

/* Every error a link function returns; link_error_format words each. */
typedef enum link_err {
	LINK_OK = 0,
	LINK_E_TOO_LONG = -1,     /* the link is longer than LINK_MAX */
	LINK_E_SCHEME = -2,       /* not one of the schemes above */
	LINK_E_NO_USER = -3,      /* no password or id before the '@' */
	LINK_E_NO_HOST = -4,      /* no host */
	LINK_E_NO_PORT = -5,      /* no port where the format has no default */
	LINK_E_BAD_PORT = -6,     /* not a number in 1-65535 */
	LINK_E_BAD_UUID = -7,     /* the id is not 8-4-4-4-12 hex digits */
	LINK_E_BASE64 = -8,       /* base64 that does not decode */
	LINK_E_JSON = -9,         /* the vmess body is not a flat JSON object */
	LINK_E_METHOD = -10,      /* a shadowsocks method the config does not know */
	LINK_E_NETWORK = -11,     /* a transport other than tcp, ws or grpc */
	LINK_E_SECURITY = -12,    /* a security other than none or tls */
	LINK_E_PERCENT = -13,     /* a bad %XX, or %00 */
	LINK_E_UTF8 = -14,        /* decoded text that is not UTF-8 */
	LINK_E_UNSUPPORTED = -15, /* a feature the config cannot carry (flow, plugin, obfs ...) */
	LINK_E_LISTEN_ANY = -16,  /* export: the inbound listens on 0.0.0.0 or ::, no --host */
	LINK_E_SPACE = -17,       /* the output buffer is too small */
	LINK_E_NOMEM = -18,
	LINK_E_CHECK = -19,       /* the printed block fails the checks --test runs */
	LINK_E_COUNT_ = 20,
} link_err;

/* An error and the piece of input it quotes (NUL-terminated, cut at
 * LINK_DETAIL_MAX - 1 bytes, bytes outside printable ASCII written '?');
 * for LINK_E_CHECK the checks' whole message, made printable the same way. */
typedef struct link_error {
	link_err code;
	char detail[LINK_TEXT_MAX];
} link_error;

/* Writes the error's one line, without a newline, into out (NUL-terminated,
 * cut to size). The words come from one table in link.c; docs/links.md
 * lists them. Returns out. */
const char *link_error_format(const link_error *e, char *out, size_t size);

/* Parses len bytes of link into *out, which must be zeroed: tag (the
 * link's name, else "<protocol>-<host>"), protocol, server, port and
 * has_port, settings and stream, every string owned by *out; then runs
 * link_check on it, so that every outbound it gives prints a block --test
 * takes (issue 32 D4). Returns 0, or a negative link_err with *e filled and
 * *out freed and zeroed. The text is borrowed for the call only; it need
 * not be NUL-terminated. */
__attribute__((warn_unused_result)) int link_import(const char *text, size_t len,
                                                    etm_outbound_spec *out, link_error *e);

/* The checks --test runs, on o's printed block after a placeholder
 * inbound: the config loader (with etm_spec_check), then everything a start
 * would build (etm_supervisor_check: the server's name, the TLS context
 * with its ALPN list, the gRPC service name, the shadowsocks 2022 key).
 * A hysteria2 outbound gets the loader's checks only: this build refuses
 * every one at a start, which the printed block says. The tag is cut to
 * LINK_DETAIL_MAX - 1 bytes for the check, so the message quotes it short
 * (one outbound has no tag to clash with). Returns 0, or LINK_E_CHECK with
 * the checks' message in e->detail (LINK_E_NOMEM when memory ran out). */
__attribute__((warn_unused_result)) int link_check(const etm_outbound_spec *o, link_error *e);

/* Frees what link_import put in *o and zeroes it. */
void link_outbound_free(etm_outbound_spec *o);

/* Writes o as one [[outbound]] block of the config (the keys link_import
 * sets, in the order docs/links.md shows) into out, NUL-terminated. A
 * hysteria2 outbound gets a first comment line saying a start refuses it.
 * Returns the length written, or LINK_E_SPACE when size is too small. */
__attribute__((warn_unused_result)) int link_toml_write(const etm_outbound_spec *o, char *out,
                                                        size_t size);

/* Whether link_export_inbound makes links for this inbound's protocol:
 * trojan, vless, vmess and shadowsocks. */
int link_exportable(etm_protocol p);

/* Writes the links of one inbound, one line ('\n'-ended) per user, into
 * out, NUL-terminated. host is the address clients dial (NULL: the
 * inbound's listen address, 127.0.0.1 when unset). Returns the length
 * written, or a negative link_err with *e filled: LINK_E_LISTEN_ANY when
 * host is NULL and the inbound listens on every address, LINK_E_SPACE. */
__attribute__((warn_unused_result)) int link_export_inbound(const etm_inbound_spec *in,
                                                            const char *host, char *out,
                                                            size_t size, link_error *e);

/* ---- codecs the module is built on, exported for its tests ---- */

/* Decodes base64, standard (+/) or URL-safe (-_) alphabet, padded or not
 * (RFC 4648 sections 4 and 5); whitespace is not skipped. Writes at most
 * size bytes. Returns the length, or -1 when the text is not base64 or the
 * result does not fit. */
__attribute__((warn_unused_result)) long link_base64_decode(const char *in, size_t len,
                                                            unsigned char *out, size_t size);

/* Decodes %XX escapes (RFC 3986 section 2.1); '+' stays '+'. Returns the
 * length, or -1 on a bad or cut escape, %00, or no room (out may equal in:
 * the result is never longer). */
__attribute__((warn_unused_result)) long link_percent_decode(const char *in, size_t len, char *out,
                                                             size_t size);

#endif
