/* splice.h - zero-copy relay between two plain TCP sockets with splice(2) through a pipe per direction. */
#ifndef ETM_RUNTIME_SPLICE_H
#define ETM_RUNTIME_SPLICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* Bytes moved by one splice call, and what a direction's pipe may hold: the
 * default pipe capacity, so a slow reader holds at most this much per
 * direction (the backpressure bound, like ENDPOINT_MAX_PENDING for the
 * buffered relay). */
#define SPLICE_CHUNK (64 * 1024)

typedef struct splicer splicer;

typedef struct splicer_events {
	/* Bytes moved (for the idle timeout). May be NULL. */
	void (*on_activity)(void *ud);
	/* n bytes were read into a direction's pipe: dir 0 from a (toward b),
	 * 1 from b. The owner may hold that direction from here
	 * (splicer_hold): a user's rate paces the flow as the buffered relay
	 * paces it. May be NULL. */
	void (*on_read)(void *ud, int dir, uint64_t n);
	/* Both directions ended (each side's EOF passed on as a shutdown), or
	 * an error (err < 0, a libuv error code). Called once; the splicer
	 * is stopped and freed after it returns. */
	void (*on_end)(void *ud, int err);
} splicer_events;

/* Relays between the connected sockets a and b, which it takes over (it
 * closes them). Returns NULL when the pipes cannot be made (the caller
 * still owns a and b then). ev is borrowed; ud is passed back. */
splicer *splicer_start(uv_loop_t *loop, int a, int b, const splicer_events *ev, void *ud);

/* Bytes moved so far from a to b and from b to a (written out of the
 * pipes). Valid until on_end returns or splicer_stop. */
void splicer_bytes(const splicer *s, uint64_t *ab, uint64_t *ba);

/* Stops (on) or resumes reading the socket that feeds direction dir (0: a
 * to b); what its pipe holds still goes out, and its EOF waits. */
void splicer_hold(splicer *s, int dir, bool on);

/* The most one splice call reads for direction dir from its socket: max
 * (0: SPLICE_CHUNK, the default). A paced direction reads less at a time,
 * so it runs less ahead of its rate. */
void splicer_set_chunk(splicer *s, int dir, size_t max);

/* Stops at once: closes both sockets; no event runs after. */
void splicer_stop(splicer *s);

#endif
