/* stack.h - an ordered stack of sans-io layers with bounded queues between them: wire bytes at the bottom, app bytes at the top. */
#ifndef ETM_TRANSPORT_STACK_H
#define ETM_TRANSPORT_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/layer.h"

/* Layers one connection may carry: TLS, WebSocket and a proxy client's
 * framing is three; one to spare. */
#define STACK_MAX_LAYERS 4

/* Bytes one queue between two layers holds: one TLS record's plaintext and
 * its framing. A full queue stops the layer feeding it (backpressure). */
#define STACK_QUEUE_CAP (17 * 1024)

typedef struct stack stack;

/* An empty stack (the app talks to the wire directly). NULL on no memory. */
stack *stack_new(void);

/* Frees the stack and every layer in it. */
void stack_free(stack *s);

/* Puts l on top of the stack (the stack owns it from now on). Returns 0, or
 * -1 when the stack is full (l is freed). */
__attribute__((warn_unused_result)) int stack_push(stack *s, layer *l);

size_t stack_depth(const stack *s);

/* Runs every client layer's start (bottom to top) and moves what it can.
 * Returns 0, or a LAYER_ERR_*. */
__attribute__((warn_unused_result)) int stack_start(stack *s);

/* Bytes read from the socket. Returns how many were taken (less than len
 * when the stack is full: offer the rest again after draining the app
 * side), or a LAYER_ERR_*. */
__attribute__((warn_unused_result)) ssize_t stack_from_wire(stack *s, const uint8_t *in,
                                                            size_t len);

/* Bytes the app wants sent. Returns how many were taken (less than len
 * when the top queue is full; bytes taken before the stack is ready wait in
 * it and go out once it is), or a LAYER_ERR_*. */
__attribute__((warn_unused_result)) ssize_t stack_from_app(stack *s, const uint8_t *in,
                                                           size_t len);

/* What the socket should write next: *data points at the bytes, valid until
 * the next call on the stack; returns their count (0: nothing). */
size_t stack_wire_out(const stack *s, const uint8_t **data);
/* n bytes of stack_wire_out were written. Moves more through the stack. */
__attribute__((warn_unused_result)) int stack_wire_done(stack *s, size_t n);

/* What arrived for the app: as above. */
size_t stack_app_in(const stack *s, const uint8_t **data);
/* n bytes of stack_app_in were used. */
__attribute__((warn_unused_result)) int stack_app_done(stack *s, size_t n);

/* Every layer's handshake is done. */
bool stack_ready(const stack *s);

/* Every layer is a pass-through now (layer.h passthrough) and no byte
 * waits anywhere in the stack, nor has it failed or begun its orderly end:
 * the stack is the identity on the bytes, so its owner may free it and
 * move bytes between the wire and the app itself (endpoint_unstack). An
 * empty stack is one. */
bool stack_passthrough(const stack *s);

/* Bytes the app side may still hand in right now (the top queue's room). */
size_t stack_app_room(const stack *s);

/* The app will send nothing more: each layer's orderly end goes out
 * (top to bottom). A layer's end waits until it has taken every byte sent
 * before it (a layer whose room below is full holds them); the moves of
 * later calls run it once it has (stack_shut_pending says whether one
 * waits). Returns 0 or a LAYER_ERR_*; a second call does nothing. */
__attribute__((warn_unused_result)) int stack_shutdown(stack *s);

/* stack_shutdown ran and a layer's orderly end has not yet. */
bool stack_shut_pending(const stack *s);

/* A layer saw its peer's end (layer.h peer_ended) and every app byte
 * before it was taken: the app's EOF, though the socket is open. */
bool stack_peer_ended(const stack *s);

/* The earliest of the layers' deadlines (layer.h), in the shell's loop
 * time in ms; 0 when no layer has one. */
uint64_t stack_deadline(const stack *s);

/* The time is now: every layer whose deadline has come runs its on_time,
 * then bytes move as after any call. Returns 0 or a LAYER_ERR_*. */
__attribute__((warn_unused_result)) int stack_on_time(stack *s, uint64_t now);

/* The name of the lowest layer whose handshake is not done, NULL when all
 * are ("tls", "socks", ...): says who the peer left hanging. */
const char *stack_waiting_layer(const stack *s);

/* The text of the error a call returned: "<layer>: <reason>". */
const char *stack_error(const stack *s);

#endif
