/* dns.h - the DNS resolver of one worker loop: c-ares driven by libuv, answering from the process's shared dns_cache first. */
#ifndef ETM_RUNTIME_DNS_H
#define ETM_RUNTIME_DNS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "runtime/dns_cache.h"

/* How long a lookup may take before its callback gets DNS_ETIMEOUT, when the
 * caller passes 0: glibc's resolver default (resolv.conf(5) "timeout:5"). */
#define DNS_TIMEOUT_DEFAULT_MS 5000
/* Longest lookup timeout accepted; longer values are cut to it. A client
 * waiting on a dial gives up long before a minute. */
#define DNS_TIMEOUT_MAX_MS 60000

/* How long "no such host" (NXDOMAIN, or a name with neither A nor AAAA) is
 * remembered. RFC 2308 would take the SOA minimum, which getaddrinfo does not
 * expose; a few seconds absorbs a client retrying a dead name in a loop
 * while a name created a moment later is found almost at once. */
#define DNS_NEGATIVE_TTL_S 5

/* Lookups one resolver has in c-ares at once (distinct names; callers
 * asking for the same name share one lookup). Past it dns_resolve answers
 * DNS_EBUSY instead of growing without bound. */
#define DNS_MAX_LOOKUPS 1024

/* Servers one resolver accepts from the config. c-ares tries them in turn,
 * so past a handful more servers only lengthen a failing lookup. */
#define DNS_MAX_SERVERS 16

/* Statuses the callback and dns_resolver_new report; texts in dns_strerror. */
typedef enum dns_status {
	DNS_OK = 0,
	DNS_ENOTFOUND = -1,        /* NXDOMAIN, or no A/AAAA record for the name */
	DNS_ETIMEOUT = -2,         /* no answer within the resolver's timeout */
	DNS_ESERVFAIL = -3,        /* the server failed, refused, or answered garbage */
	DNS_ECANCELLED = -4,       /* the resolver was deleted while the query waited */
	DNS_EBADNAME = -5,         /* empty, over DNS_NAME_MAX, or not a host name */
	DNS_EBADSERVER = -6,       /* a configured server is not one of the forms below */
	DNS_ENOMEM = -7,           /* out of memory */
	DNS_EBUSY = -8,            /* DNS_MAX_LOOKUPS already in flight */
	DNS_ESETUP = -9,           /* c-ares could not start (library or channel init) */
	DNS_ETOOMANYSERVERS = -10, /* more than DNS_MAX_SERVERS configured */
} dns_status;

/* The fixed text of a status ("dns: no such host", ...); "dns: unknown
 * error" for a value not in the list. */
const char *dns_strerror(int status);

typedef struct dns_resolver dns_resolver;
typedef struct dns_query dns_query;

/* The answer to one dns_resolve. status is a dns_status. On DNS_OK addrs
 * holds n (1..DNS_MAX_ADDRS) AF_INET / AF_INET6 addresses with port 0 (the
 * caller sets the port), in the order the resolver gave them, both families
 * mixed; picking a family first is the caller's job. On an error n is 0 and
 * addrs NULL. addrs is borrowed for the duration of the call; the query is
 * freed when the callback returns. Runs on the resolver's loop thread, never
 * inside dns_resolve itself. */
typedef void (*dns_cb)(int status, const struct sockaddr_storage *addrs, size_t n, void *data);

/* Threads: a resolver and its queries belong to the thread running loop:
 * every function below is called on that thread (dns_resolver_new may also
 * run before the loop does). The cache is the one object resolvers on
 * different loops share (see dns_cache.h); dns_strerror is callable anywhere.
 *
 * Makes a resolver on loop. cache is borrowed, may be shared with other
 * resolvers on other loops, must outlive this resolver, and may be NULL (no
 * caching). servers (borrowed for the call) are "ip", "ip:port", "[v6]",
 * "[v6]:port" or a bare v6 address; with n_servers == 0 the system's
 * resolv.conf servers are used. Search domains are never applied: names are
 * resolved as given (a proxy's destinations are full names). timeout_ms
 * bounds each dns_resolve (0: DNS_TIMEOUT_DEFAULT_MS, cut to
 * DNS_TIMEOUT_MAX_MS): the callback comes at the latest that long after the
 * call (plus loop latency), with DNS_ETIMEOUT if nothing usable came; c-ares
 * may give up sooner on its own schedule, also as DNS_ETIMEOUT. The c-ares
 * channel (and its read of resolv.conf) is made when the first lookup
 * starts, not here: one that cannot be made answers that lookup's queries
 * with DNS_ESETUP, and the next lookup tries again. Returns NULL on failure
 * with one of these texts in err (err may be NULL):
 *   dns: bad server address "<server>"         (DNS_EBADSERVER)
 *   dns: too many servers: at most 16          (DNS_ETOOMANYSERVERS)
 *   dns: resolver setup failed: <c-ares text>  (DNS_ESETUP: c-ares's library init)
 *   dns: out of memory                         (DNS_ENOMEM) */
__attribute__((warn_unused_result)) dns_resolver *
dns_resolver_new(uv_loop_t *loop, dns_cache *cache, const char *const *servers, size_t n_servers,
                 uint64_t timeout_ms, char *err, size_t err_size);

/* The end of a backend's lookup: status a dns_status; on DNS_OK n (1..
 * DNS_MAX_ADDRS) addresses, port 0, valid for ttl seconds. */
typedef void (*dns_backend_cb)(void *token, int status, const struct sockaddr_storage *addrs,
                               size_t n, uint32_t ttl);

/* What a resolver asks in place of c-ares (the DNS service, dns_service.h,
 * when the config has one): the cache, shared lookups, literals, timeouts
 * and cancelling stay the resolver's. */
typedef struct dns_backend {
	/* Starts looking name up; done(token, ...) runs exactly once, later
	 * (never inside start), unless cancel(self, handle) came first.
	 * Returns the handle, or NULL when it cannot start (then done never
	 * runs). */
	void *(*start)(void *self, const char *name, dns_backend_cb done, void *token);
	void (*cancel)(void *self, void *handle);
	void *self;
} dns_backend;

/* Lookups r starts from now on go to b (copied; what b->self points at
 * must outlive r or the next call). NULL: c-ares again. */
void dns_resolver_set_backend(dns_resolver *r, const dns_backend *b);

/* Deletes the resolver: every query not yet answered gets its callback once,
 * right here, with DNS_ECANCELLED, and nothing after. Not from inside a dns
 * callback of this resolver. The handles close asynchronously: run the loop
 * once more (as for any libuv handle) before uv_loop_close. NULL is a no-op. */
void dns_resolver_del(dns_resolver *r);

/* Starts resolving name (an IP literal or a host name; one trailing root dot
 * is allowed). The callback always runs later from the loop, never inside
 * this call: an IP literal (no query sent), a cache hit or negative hit (no
 * query sent) and a bad name are answered on the next loop iteration; other
 * names when the lookup ends or the timeout passes. Callers asking for a name
 * already being looked up share that lookup. data is borrowed until the
 * callback or dns_query_cancel. Returns the query handle, or NULL when memory
 * runs out or the resolver is being deleted (then the callback never runs). */
__attribute__((warn_unused_result)) dns_query *dns_resolve(dns_resolver *r, const char *name,
                                                           dns_cb cb, void *data);

/* Withdraws a query: its callback will not run. Only before the callback has
 * run, or from inside its own callback (then a no-op). The lookup it shared
 * goes on and still fills the cache. NULL is a no-op. */
void dns_query_cancel(dns_query *q);

#endif
