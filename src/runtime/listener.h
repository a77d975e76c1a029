/* listener.h - a TCP listening socket on one worker, opened with SO_REUSEPORT so every worker has its own. */
#ifndef ETM_RUNTIME_LISTENER_H
#define ETM_RUNTIME_LISTENER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "runtime/worker.h"

/* Pending connections the kernel queues per listener. */
#define LISTENER_BACKLOG 1024

/* TCP_DEFER_ACCEPT on the listeners of protocols whose client speaks
 * first (listener_defer_accept): seconds the kernel holds a connection
 * that has sent nothing before handing it over anyway. */
#define LISTENER_DEFER_ACCEPT_S 1

/* Connections accepted per wake-up at most, so one busy listener leaves the
 * loop to the connections it has already. */
#define LISTENER_ACCEPT_BATCH 64

/* Out of descriptors, a listener stops accepting for this long: clients
 * wait in the backlog (bounded by LISTENER_BACKLOG) while connections end,
 * and the worker's loop keeps serving them instead of spinning in accept. */
#define LISTENER_BACKOFF_MS 100

/* Sockets passed in at most: an upgrade passes one per worker per inbound
 * (TCP, and UDP for udp_lb and shadowsocks), so 16 workers with 64
 * inbounds fit; socket activation passes one per ListenStream= line. */
#define LISTENER_INHERITED_MAX 1024

typedef struct listener listener;

/* Records fds, sockets the service manager passed (borrowed for the life
 * of the process): from now on listener_open serves on the TCP ones bound
 * to exactly its ip:port, through descriptors of its own, instead of
 * binding, and listener_check_free passes that address (so does
 * listener_check_free_udp for a UDP one, which listener_take_udp hands
 * out). With m of them for one address, worker i serves number i % m, and
 * number j past the workers' count n as well where j % n == i. Call before
 * any worker starts. Keeps the first LISTENER_INHERITED_MAX; can't fail. */
void listener_inherit(const int *fds, size_t n);

/* The same for sockets the process an upgrade replaces passed: owned (past
 * the bound they are closed now) until listener_inherit_release. */
void listener_inherit_owned(const int *fds, size_t n);

/* Closes the owned passed sockets and forgets them, once every listener
 * that serves one has a descriptor of its own (after the start): a later
 * reload binds anew. The thread that started the workers; can't fail. */
void listener_inherit_release(void);

/* The passed UDP socket number index for ss (a worker's index: each
 * worker its own socket, so the kernel's 4-tuple hash keeps a client on
 * one worker). Returns 0 with *fd a descriptor of the caller's own
 * (non-blocking, close-on-exec, bound), or with *fd -1 when none is passed
 * for that index (bind one: SO_REUSEPORT joins the passed ones' group);
 * or a negative errno. */
__attribute__((warn_unused_result)) int listener_take_udp(const struct sockaddr_storage *ss,
                                                          size_t index, int *fd);

/* A connection was accepted: fd (non-blocking, close-on-exec) is the
 * callee's, to serve (conn_accept) or close. */
typedef void (*listener_fn)(listener *l, int fd, void *data);

/* Inside fn: the address of the client being handed over (accept4
 * filled it in). */
const struct sockaddr_storage *listener_peer(const listener *l);

/* Whether the accepted sockets have TCP_NODELAY already (set on the
 * listening socket, which Linux copies to each accepted one). */
bool listener_nodelay(const listener *l);

/* The kernel wakes l (and its surplus sockets) for a connection only once
 * the client's first bytes are in, or after secs (TCP_DEFER_ACCEPT): for
 * protocols whose client speaks first, the accept and the first read come
 * in one wake-up, and a connection that never speaks costs nothing until
 * then. Best effort: a socket that refuses it accepts as before. */
void listener_defer_accept(listener *l, int secs);

/* Binds ip:port on w's loop (worker thread only) and starts listening. fn
 * and data are borrowed until listener_close. Returns the listener, or NULL
 * with "failed to listen on <ip>:<port>: <reason>" in err. */
listener *listener_open(worker *w, const char *ip, uint16_t port, listener_fn fn, void *data,
                        char *err, size_t err_size);

/* Fails with "failed to listen on <ip>:<port>: address already in use"
 * when some socket already listens there. SO_REUSEPORT would let this
 * process share the port with another instance of itself silently; a probe
 * bind without it tells. Returns 0 when the address is free (or port 0). */
__attribute__((warn_unused_result)) int listener_check_free(const char *ip, uint16_t port,
                                                            char *err, size_t err_size);

/* The same for UDP: fails when a UDP socket holds ip:port. */
__attribute__((warn_unused_result)) int listener_check_free_udp(const char *ip, uint16_t port,
                                                                char *err, size_t err_size);

/* Fills ss from an IP literal and a port; returns 0, or -1 with "failed to
 * listen on <ip>:<port>: not an IP address" in err. */
__attribute__((warn_unused_result)) int listener_addr(const char *ip, uint16_t port,
                                                      struct sockaddr_storage *ss, char *err,
                                                      size_t err_size);

/* Writes "failed to listen on <ip>:<port>: <why>" to err: the one text of
 * every listener's failure, TCP or UDP. */
void listener_failed(char *err, size_t err_size, const char *ip, uint16_t port, const char *why);

/* The listening sockets l serves on (one, or more when passed sockets
 * outnumber the workers): up to max into fds, returns how many. The
 * listener's worker thread only; they stay l's. */
size_t listener_fds(const listener *l, int *fds, size_t max);

/* The worker whose loop the listener runs on. */
worker *listener_worker(const listener *l);

/* The port actually bound (useful with port 0). */
uint16_t listener_port(const listener *l);

/* Stops accepting and frees the listener once its handle is closed. */
void listener_close(listener *l);

/* What fn is called with from now on (a reload hands an unchanged socket a
 * new inbound config). The listener's worker thread only. */
void listener_set_data(listener *l, void *data);

#endif
