/* fuzz_vmess_server.c - libFuzzer target: the VMess AEAD server core fed whole and cut in two, on raw bytes and on fuzzed headers sealed with a valid AuthID; the body layer on what follows. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/vmess_server.h"

/* Input: flags, two bytes of cut point, two bytes of declared length, then
 * the bytes.
 *   flags bit 0: seal the bytes as a header (the fuzzer cannot forge an
 *          AuthID or a GCM tag): AuthID of user 0 at NOW, the declared
 *          length sealed as the length, the bytes up to that length sealed
 *          as the header (fewer when there are fewer: a truncated request),
 *          the rest after it as the body;
 *   bit 1: a replay filter, and the request fed twice (the second refused);
 *   bit 2: the AuthID's time 200 s off (outside the window). */

#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x))                                                                          \
			abort();                                                                   \
	} while (0)

#define NOW 1700000000
#define IN_MAX (VMESS_REQUEST_MAX + 4096)

static const uint8_t UUID0[16] = {0x6c, 0x1b, 0x0e, 0x6a, 0x6e, 0x3d, 0x4c, 0x1e,
                                  0x9d, 0x8a, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f};
static const uint8_t UUID1[16] = {0xb8, 0x31, 0x38, 0x1d, 0x63, 0x24, 0x4d, 0x53,
                                  0xad, 0x4f, 0x8c, 0xda, 0x48, 0xb3, 0x08, 0x11};
static vmess_account users[2];
static bool ready;

typedef struct outcome {
	ssize_t ret;
	proto_event ev;
} outcome;

static int replay_add(void *ud, const uint8_t id[VMESS_AUTH_ID_LEN], int64_t expiry, int64_t now)
{
	return vmess_replay_add(ud, id, expiry, now);
}

static void kdf3(const char *label, const uint8_t *auth, const uint8_t *nonce, uint8_t out[32])
{
	vmess_slice p[3] = {{(const uint8_t *)label, strlen(label)}, {auth, 16}, {nonce, 8}};
	CHECK(vmess_kdf(users[0].cmd_key, 16, p, 3, out) == 0);
}

/* AuthID, Seal(declared), nonce, Seal(h[0, hlen)) into out; its length. */
static size_t seal(int64_t t, uint16_t declared, const uint8_t *h, size_t hlen, uint8_t *out)
{
	static const uint8_t rand4[4] = {9, 8, 7, 6}, nonce8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	uint8_t k[32], n[32], len2[2] = {(uint8_t)(declared >> 8), (uint8_t)declared};
	uint8_t *auth = out, *nonce = out + 16 + 2 + VMESS_TAG_LEN;
	CHECK(vmess_auth_id(users[0].cmd_key, t, rand4, auth) == 0);
	memcpy(nonce, nonce8, 8);
	kdf3(VMESS_KDF_REQ_LEN_KEY, auth, nonce, k);
	kdf3(VMESS_KDF_REQ_LEN_IV, auth, nonce, n);
	CHECK(vmess_gcm_seal(k, n, auth, 16, len2, 2, out + 16) == 0);
	kdf3(VMESS_KDF_REQ_KEY, auth, nonce, k);
	kdf3(VMESS_KDF_REQ_IV, auth, nonce, n);
	CHECK(vmess_gcm_seal(k, n, auth, 16, h, hlen, nonce + 8) == 0);
	return 16 + 2 + VMESS_TAG_LEN + 8 + hlen + VMESS_TAG_LEN;
}

static void feed(vmess_server *s, const uint8_t *in, size_t len, outcome *o)
{
	proto_out out;
	o->ret = vmess_server_feed(s, in, len, NOW, &out, &o->ev);
	CHECK(out.len == 0);
	switch (o->ev.kind) {
	case PROTO_EV_NONE:
		CHECK(o->ret == 0 && o->ev.reason == NULL);
		CHECK(len < VMESS_REQUEST_MAX); /* a decision comes within the bound */
		break;
	case PROTO_EV_OPEN:
		CHECK(o->ret > 0 && (size_t)o->ret <= len && o->ret <= VMESS_REQUEST_MAX);
		CHECK(o->ev.user == 0);
		break;
	case PROTO_EV_CLOSE:
		CHECK(o->ev.reason != NULL);
		CHECK(o->ret == 0 || o->ret == PROTO_ERR_MALFORMED);
		break;
	}
}

/* The body layer over whatever follows the request: it opens or refuses,
 * never reads past its input. */
static void body(const vmess_server *s, const uint8_t *in, size_t len)
{
	static const uint8_t seed[32];
	layer *l = vmess_server_body_new(s, seed);
	CHECK(l != NULL);
	static uint8_t buf[2 + 65535];
	size_t used = 0;
	bool failed = false;
	for (int rounds = 0; rounds < 64; rounds++) {
		layer_buf down = {buf, 0, sizeof buf};
		ssize_t n = l->ops->from_above(l, in + used, len - used, &down);
		if (n < 0) {
			CHECK(n == LAYER_ERR_PROTO && l->ops->error(l) != NULL);
			failed = true;
			break;
		}
		used += (size_t)n;
		CHECK(used <= len);
		if (n == 0 && down.len == 0)
			break;
	}
	layer_buf up = {buf, 0, sizeof buf};
	uint8_t frame[6] = {0, 4, 'p', 'o', 'n', 'g'};
	bool udp = s->req.cmd == VMESS_CMD_UDP;
	ssize_t n = l->ops->from_below(l, udp ? frame : frame + 2, udp ? 6 : 4, &up, NULL);
	CHECK(failed ? n == LAYER_ERR_PROTO : n == (udp ? 6 : 4));
	l->ops->free(l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ready) {
		CHECK(vmess_account_init(&users[0], UUID0) == 0);
		CHECK(vmess_account_init(&users[1], UUID1) == 0);
		ready = true;
	}
	if (size < 5)
		return 0;
	uint8_t flags = data[0];
	uint16_t declared = (uint16_t)(data[3] << 8 | data[4]);
	const uint8_t *p = data + 5;
	size_t plen = size - 5 < 4096 ? size - 5 : 4096;
	static uint8_t in[IN_MAX];
	size_t len;
	if (flags & 1) {
		size_t hlen = plen < declared ? plen : declared;
		if (hlen > VMESS_HEADER_MAX)
			hlen = VMESS_HEADER_MAX;
		int64_t t = (flags & 4) ? NOW + 200 : NOW;
		len = seal(t, declared, p, hlen, in);
		memcpy(in + len, p + hlen, plen - hlen);
		len += plen - hlen;
	} else {
		memcpy(in, p, plen);
		len = plen;
	}
	size_t cut = ((size_t)data[1] << 8 | data[2]) % (len + 1);

	static vmess_replay filter;
	memset(&filter, 0, sizeof filter);
	vmess_server s;
	outcome whole, split;
	vmess_server_init(&s, users, 2, (flags & 2) ? replay_add : NULL, &filter);
	feed(&s, in, len, &whole);
	if (whole.ev.kind == PROTO_EV_OPEN) {
		proto_out out;
		CHECK(vmess_server_opened(&s, &out) == 0 && out.len > 0);
		if (vmess_server_chunked(&s))
			body(&s, in + whole.ret, len - (size_t)whole.ret);
	}

	/* cut in two: the same decision (with a filter, a second sight is a replay) */
	memset(&filter, 0, sizeof filter);
	vmess_server_init(&s, users, 2, (flags & 2) ? replay_add : NULL, &filter);
	feed(&s, in, cut, &split);
	if (split.ev.kind == PROTO_EV_NONE)
		feed(&s, in, len, &split);
	CHECK(split.ret == whole.ret && split.ev.kind == whole.ev.kind);
	CHECK(split.ev.reason == whole.ev.reason);

	if ((flags & 2) && whole.ev.kind == PROTO_EV_OPEN) {
		vmess_server_init(&s, users, 2, replay_add, &filter);
		feed(&s, in, len, &split);
		CHECK(split.ev.kind == PROTO_EV_CLOSE && split.ret == 0);
	}
	return 0;
}
