/* proxy.h - what every proxy client outbound shares: its server, the transport to it (TLS, WebSocket), and streams and datagram links through it. */
#ifndef ETM_OUTBOUND_PROXY_H
#define ETM_OUTBOUND_PROXY_H

#include <stddef.h>

#include "outbound/outbound.h"

/* Copies the server address and transport of a proxy client's config, once
 * per outbound on the control thread (a reference on cfg->tls). Returns
 * NULL with "out of memory" in err. */
proxy_transport *proxy_transport_new(const outbound_config *cfg, char *err, size_t err_size);
void proxy_transport_del(proxy_transport *t);

/* Mux.Cool sub-flows a session of t carries at once; 0: mux is off. */
unsigned proxy_transport_mux(const proxy_transport *t);

/* connect_stream of a proxy client: dials o's server through its transport
 * with o->proto->request on top (outbound_proto, connect_stream). */
connect_pending *proxy_connect_stream(const outbound *o, worker *w, dns_resolver *dns,
                                      const addr_dest *dest, connect_cb cb, void *data);

/* connect_datagram of a proxy client that carries UDP: the same stream with
 * the protocol's UDP request, then o->proto->dgram_over once it is ready. */
connect_pending *proxy_connect_datagram(const outbound *o, worker *w, dns_resolver *dns,
                                        const addr_dest *to, const dgram_handlers *h, void *ud,
                                        outbound_dgram_cb done, void *oud);

#endif
