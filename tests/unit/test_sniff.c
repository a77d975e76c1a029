/* test_sniff.c - the sniffer fed every prefix of built and captured ClientHellos and HTTP heads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proto/sniff.h"

/* ---- checking every prefix ---- */

/* The answer may come at any length (for cases where the exact byte is not the point). */
#define ANY SIZE_MAX

/* Bytes appended after a decided case: what follows never changes the answer. */
#define JUNK 64

#define BUF_MAX (4 * SNIFF_MAX_BYTES)

/* Feeds every prefix of d[0, n): NEED_MORE below `at`, then `want` for
 * every longer prefix, d followed by junk included. `at` is ANY when the
 * exact byte does not matter; want NEED_MORE means no prefix is decided.
 * name and *proto must stay untouched unless FOUND. */
static void check(const uint8_t *d, size_t n, size_t at, sniff_result want, const char *want_name,
                  sniff_proto want_proto)
{
	static uint8_t buf[BUF_MAX + JUNK];
	assert_true(n <= BUF_MAX);
	memcpy(buf, d, n);
	memset(buf + n, 0xa5, JUNK);
	size_t total = want == SNIFF_NEED_MORE ? n : n + JUNK;
	size_t first = ANY;
	for (size_t k = 0; k <= total; k++) {
		char name[SNIFF_NAME_MAX + 1];
		memset(name, 'Z', sizeof name);
		sniff_proto proto = (sniff_proto)77;
		sniff_result r = sniff_name(buf, k, name, sizeof name, &proto);
		if (r == SNIFF_NEED_MORE) {
			if (first != ANY)
				fail_msg("prefix %zu: NEED_MORE after an answer at %zu", k, first);
			assert_int_equal(name[0], 'Z');
			continue;
		}
		if (first == ANY)
			first = k;
		if (r != want)
			fail_msg("prefix %zu of %zu: result %d, want %d", k, n, r, want);
		if (r == SNIFF_FOUND) {
			assert_string_equal(name, want_name);
			assert_int_equal(proto, want_proto);
		} else {
			assert_int_equal(name[0], 'Z');
			assert_int_equal(proto, 77);
		}
	}
	if (want == SNIFF_NEED_MORE)
		assert_true(first == ANY);
	else if (at != ANY && first != at)
		fail_msg("answer at prefix %zu, want %zu", first, at);
	else
		assert_true(first != ANY);
}

static void check_str(const char *s, size_t at, sniff_result want, const char *want_name)
{
	check((const uint8_t *)s, strlen(s), at, want, want_name, SNIFF_PROTO_HTTP);
}

/* ---- building ClientHellos byte by byte ---- */

typedef struct bytes {
	uint8_t b[BUF_MAX];
	size_t n;
} bytes;

static void put8(bytes *o, unsigned v)
{
	assert_true(o->n < BUF_MAX);
	o->b[o->n++] = (uint8_t)v;
}

static void put16(bytes *o, unsigned v)
{
	put8(o, v >> 8);
	put8(o, v & 0xff);
}

static void put(bytes *o, const void *p, size_t n)
{
	assert_true(o->n + n <= BUF_MAX);
	if (n > 0)
		memcpy(o->b + o->n, p, n);
	o->n += n;
}

static void fill(bytes *o, uint8_t v, size_t n)
{
	assert_true(o->n + n <= BUF_MAX);
	memset(o->b + o->n, v, n);
	o->n += n;
}

/* A length field of w bytes whose value is patched in by close_len. */
static size_t open_len(bytes *o, size_t w)
{
	size_t at = o->n;
	fill(o, 0, w);
	return at;
}

static void close_len(bytes *o, size_t at, size_t w)
{
	size_t v = o->n - at - w;
	for (size_t i = 0; i < w; i++)
		o->b[at + i] = (uint8_t)(v >> (8 * (w - 1 - i)));
}

/* Extension { ExtensionType extension_type; opaque extension_data<0..2^16-1>; } */
static void ext(bytes *o, unsigned type, const uint8_t *data, size_t n)
{
	put16(o, type);
	put16(o, (unsigned)n);
	put(o, data, n);
}

/* server_name carrying one host_name (RFC 6066 section 3). */
static void ext_sni(bytes *o, const char *name)
{
	put16(o, 0x0000);
	size_t e = open_len(o, 2);
	size_t l = open_len(o, 2);
	put8(o, 0); /* host_name */
	put16(o, (unsigned)strlen(name));
	put(o, name, strlen(name));
	close_len(o, l, 2);
	close_len(o, e, 2);
}

/* The extensions a browser sends besides server_name, in a browser's order. */
#define N_COMMON 12

static void ext_common(bytes *o, size_t i, size_t pq_share)
{
	static const uint8_t groups[] = {0x00, 0x08, 0x11, 0xec, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x18};
	static const uint8_t points[] = {0x01, 0x00};
	static const uint8_t sigs[] = {0x00, 0x10, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01, 0x05,
	                               0x03, 0x08, 0x05, 0x05, 0x01, 0x08, 0x06, 0x06, 0x01};
	static const uint8_t alpn[] = {0x00, 0x0c, 0x02, 'h', '2', 0x08,
	                               'h',  't',  't',  'p', '/', '1', '.', '1'};
	static const uint8_t versions[] = {0x04, 0x03, 0x04, 0x03, 0x03};
	static const uint8_t modes[] = {0x01, 0x01};
	static const uint8_t reneg[] = {0x00};
	static const uint8_t cert_comp[] = {0x02, 0x00, 0x02};
	switch (i) {
	case 0: ext(o, 0x0a0a, NULL, 0); break; /* GREASE (RFC 8701) */
	case 1: ext(o, 0x000a, groups, sizeof groups); break; /* supported_groups */
	case 2: ext(o, 0x000b, points, sizeof points); break; /* ec_point_formats */
	case 3: ext(o, 0x000d, sigs, sizeof sigs); break; /* signature_algorithms */
	case 4: ext(o, 0x0010, alpn, sizeof alpn); break; /* ALPN: h2, http/1.1 */
	case 5: ext(o, 0x0017, NULL, 0); break; /* extended_master_secret */
	case 6: ext(o, 0x0023, NULL, 0); break; /* session_ticket */
	case 7: ext(o, 0x002b, versions, sizeof versions); break; /* supported_versions */
	case 8: ext(o, 0x002d, modes, sizeof modes); break; /* psk_key_exchange_modes */
	case 9: { /* key_share: an X25519MLKEM768-sized share when asked, then X25519 */
		put16(o, 0x0033);
		size_t e = open_len(o, 2);
		size_t l = open_len(o, 2);
		if (pq_share > 0) {
			put16(o, 0x11ec);
			put16(o, (unsigned)pq_share);
			fill(o, 0x5c, pq_share);
		}
		put16(o, 0x001d);
		put16(o, 32);
		fill(o, 0x3a, 32);
		close_len(o, l, 2);
		close_len(o, e, 2);
		break;
	}
	case 10: ext(o, 0xff01, reneg, sizeof reneg); break; /* renegotiation_info */
	default: ext(o, 0x001b, cert_comp, sizeof cert_comp); break; /* compress_certificate */
	}
}

typedef struct hello {
	const char *sni;      /* NULL: no server_name */
	size_t before;        /* common extensions before server_name; the rest follow */
	size_t pq_share;      /* bytes of a post-quantum key share, 0: X25519 only */
	size_t pad;           /* bytes of a padding extension (RFC 7685), 0: none */
	bool no_extensions;   /* a TLS 1.2 hello that ends after compression_methods */
	const uint8_t *sni_raw; /* when set, the server_name extension_data as given */
	size_t sni_raw_len;
	bool sni_twice;       /* a second server_name extension at the end */
} hello;

/* The handshake message: HandshakeType client_hello(1), uint24 length,
 * then the ClientHello fields of RFC 8446 4.1.2 in order. */
static void client_hello(bytes *hs, const hello *h)
{
	static const uint8_t suites[] = {0x0a, 0x0a, 0x13, 0x01, 0x13, 0x02, 0x13, 0x03, 0xc0,
	                                 0x2b, 0xc0, 0x2f, 0xc0, 0x2c, 0xc0, 0x30, 0xcc, 0xa9,
	                                 0xcc, 0xa8, 0xc0, 0x13, 0xc0, 0x14, 0x00, 0x9c, 0x00, 0x9d};
	hs->n = 0;
	put8(hs, 1);
	size_t m = open_len(hs, 3);
	put16(hs, 0x0303); /* legacy_version */
	for (unsigned i = 0; i < 32; i++)
		put8(hs, i * 7 + 1); /* random */
	put8(hs, 32);       /* legacy_session_id: a middlebox-compatibility one */
	fill(hs, 0xe5, 32);
	put16(hs, sizeof suites);
	put(hs, suites, sizeof suites);
	put8(hs, 1); /* legacy_compression_methods: null */
	put8(hs, 0);
	if (!h->no_extensions) {
		size_t e = open_len(hs, 2);
		bool sni = h->sni != NULL || h->sni_raw != NULL;
		for (size_t i = 0; i <= N_COMMON; i++) {
			if (i == h->before && sni) {
				if (h->sni_raw != NULL)
					ext(hs, 0x0000, h->sni_raw, h->sni_raw_len);
				else
					ext_sni(hs, h->sni);
			}
			if (i < N_COMMON)
				ext_common(hs, i, h->pq_share);
		}
		if (h->sni_twice)
			ext_sni(hs, h->sni);
		if (h->pad > 0) {
			put16(hs, 0x0015);
			put16(hs, (unsigned)h->pad);
			fill(hs, 0, h->pad);
		}
		close_len(hs, e, 2);
	}
	close_len(hs, m, 3);
}

/* Carries hs in handshake records of at most chunk bytes each. */
static void records(bytes *out, const bytes *hs, size_t chunk)
{
	out->n = 0;
	for (size_t at = 0; at < hs->n; at += chunk) {
		size_t k = hs->n - at < chunk ? hs->n - at : chunk;
		put8(out, 22);
		put16(out, at == 0 ? 0x0301 : 0x0303);
		put16(out, (unsigned)k);
		put(out, hs->b + at, k);
	}
}

/* Carries hs in two records split at byte `split` of the message. */
static void two_records(bytes *out, const bytes *hs, size_t split)
{
	out->n = 0;
	put8(out, 22);
	put16(out, 0x0301);
	put16(out, (unsigned)split);
	put(out, hs->b, split);
	put8(out, 22);
	put16(out, 0x0303);
	put16(out, (unsigned)(hs->n - split));
	put(out, hs->b + split, hs->n - split);
}

static bytes hs, rec;

/* Builds h into one record and checks it answers `want` only when complete. */
static void check_hello(const hello *h, sniff_result want, const char *name)
{
	client_hello(&hs, h);
	records(&rec, &hs, 16384);
	check(rec.b, rec.n, want == SNIFF_NONE ? ANY : rec.n, want, name, SNIFF_PROTO_TLS);
}

/* ---- TLS ---- */

static void tls_plain(void **state)
{
	(void)state;
	check_hello(&(hello){.sni = "example.com"}, SNIFF_FOUND, "example.com");
	/* upper case and a trailing dot are cleaned away */
	check_hello(&(hello){.sni = "WWW.Example.COM.", .before = 3}, SNIFF_FOUND, "www.example.com");
	/* a single label and '_' are names too */
	check_hello(&(hello){.sni = "intranet", .before = 5}, SNIFF_FOUND, "intranet");
	check_hello(&(hello){.sni = "_srv.x-y.example", .before = 7}, SNIFF_FOUND, "_srv.x-y.example");
}

static void tls_many_extensions_first(void **state)
{
	(void)state;
	/* every common extension, a padding one and a large key share come first */
	check_hello(&(hello){.sni = "late.example.org", .before = N_COMMON, .pad = 300, .pq_share = 1216},
	            SNIFF_FOUND, "late.example.org");
}

static void tls_no_name(void **state)
{
	(void)state;
	check_hello(&(hello){.before = 4}, SNIFF_NONE, NULL);
	/* a TLS 1.2 hello with no extensions at all */
	hello h = {.no_extensions = true};
	client_hello(&hs, &h);
	records(&rec, &hs, 16384);
	check(rec.b, rec.n, rec.n, SNIFF_NONE, NULL, 0);
}

/* A post-quantum sized hello (about 1.7 KB, past one TCP segment) in two
 * records, and a small one split at every byte, and in one-byte records. */
static void tls_records(void **state)
{
	(void)state;
	hello big = {.sni = "pq.example", .before = 6, .pq_share = 1216, .pad = 200};
	client_hello(&hs, &big);
	assert_true(hs.n > 1500);
	records(&rec, &hs, 1000);
	check(rec.b, rec.n, rec.n, SNIFF_FOUND, "pq.example", SNIFF_PROTO_TLS);

	hello small = {.sni = "split.example", .before = 2};
	client_hello(&hs, &small);
	for (size_t split = 1; split < hs.n; split++) {
		two_records(&rec, &hs, split);
		check(rec.b, rec.n, rec.n, SNIFF_FOUND, "split.example", SNIFF_PROTO_TLS);
	}
	records(&rec, &hs, 1);
	check(rec.b, rec.n, rec.n, SNIFF_FOUND, "split.example", SNIFF_PROTO_TLS);
	records(&rec, &hs, 7);
	check(rec.b, rec.n, rec.n, SNIFF_FOUND, "split.example", SNIFF_PROTO_TLS);
}

/* ClientHellos captured from curl 7.88 / OpenSSL 3.0 (TLS 1.3, with a
 * 174-byte padding extension) and from curl --tls-max 1.2. */
static const uint8_t CURL_TLS13[] = {
	0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03, 0xf0,
	0xea, 0x67, 0xba, 0x10, 0xa0, 0x28, 0x73, 0x52, 0x4d, 0x44, 0xa0, 0xec,
	0x46, 0xd1, 0x02, 0x9a, 0x6f, 0x7f, 0x04, 0x20, 0x73, 0x79, 0x08, 0x55,
	0x8a, 0x9f, 0xca, 0xe4, 0x29, 0xdf, 0x3e, 0x20, 0x1c, 0xce, 0x8f, 0xed,
	0xdc, 0x2e, 0x9b, 0x72, 0x72, 0xe1, 0x42, 0x0f, 0xf6, 0xb7, 0xc2, 0x2f,
	0xaf, 0xf6, 0x9f, 0xc2, 0x2b, 0xf5, 0xea, 0x24, 0xb7, 0xa2, 0xd2, 0x7d,
	0x48, 0xcb, 0x20, 0x02, 0x00, 0x3e, 0x13, 0x02, 0x13, 0x03, 0x13, 0x01,
	0xc0, 0x2c, 0xc0, 0x30, 0x00, 0x9f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0xaa,
	0xc0, 0x2b, 0xc0, 0x2f, 0x00, 0x9e, 0xc0, 0x24, 0xc0, 0x28, 0x00, 0x6b,
	0xc0, 0x23, 0xc0, 0x27, 0x00, 0x67, 0xc0, 0x0a, 0xc0, 0x14, 0x00, 0x39,
	0xc0, 0x09, 0xc0, 0x13, 0x00, 0x33, 0x00, 0x9d, 0x00, 0x9c, 0x00, 0x3d,
	0x00, 0x3c, 0x00, 0x35, 0x00, 0x2f, 0x00, 0xff, 0x01, 0x00, 0x01, 0x75,
	0x00, 0x00, 0x00, 0x14, 0x00, 0x12, 0x00, 0x00, 0x0f, 0x77, 0x77, 0x77,
	0x2e, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x63, 0x6f, 0x6d,
	0x00, 0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00, 0x0a, 0x00, 0x16,
	0x00, 0x14, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x1e, 0x00, 0x19, 0x00, 0x18,
	0x01, 0x00, 0x01, 0x01, 0x01, 0x02, 0x01, 0x03, 0x01, 0x04, 0x00, 0x10,
	0x00, 0x0e, 0x00, 0x0c, 0x02, 0x68, 0x32, 0x08, 0x68, 0x74, 0x74, 0x70,
	0x2f, 0x31, 0x2e, 0x31, 0x00, 0x16, 0x00, 0x00, 0x00, 0x17, 0x00, 0x00,
	0x00, 0x31, 0x00, 0x00, 0x00, 0x0d, 0x00, 0x2a, 0x00, 0x28, 0x04, 0x03,
	0x05, 0x03, 0x06, 0x03, 0x08, 0x07, 0x08, 0x08, 0x08, 0x09, 0x08, 0x0a,
	0x08, 0x0b, 0x08, 0x04, 0x08, 0x05, 0x08, 0x06, 0x04, 0x01, 0x05, 0x01,
	0x06, 0x01, 0x03, 0x03, 0x03, 0x01, 0x03, 0x02, 0x04, 0x02, 0x05, 0x02,
	0x06, 0x02, 0x00, 0x2b, 0x00, 0x09, 0x08, 0x03, 0x04, 0x03, 0x03, 0x03,
	0x02, 0x03, 0x01, 0x00, 0x2d, 0x00, 0x02, 0x01, 0x01, 0x00, 0x33, 0x00,
	0x26, 0x00, 0x24, 0x00, 0x1d, 0x00, 0x20, 0xd3, 0x7d, 0x22, 0x8a, 0xd9,
	0xa8, 0x72, 0x49, 0xb1, 0xd7, 0x5b, 0xb3, 0x10, 0x09, 0xb2, 0xb2, 0x28,
	0x8f, 0xc2, 0xe8, 0x85, 0x02, 0xd2, 0x53, 0xe6, 0x44, 0xb5, 0x9a, 0xcf,
	0xdf, 0x09, 0x3e, 0x00, 0x15, 0x00, 0xae,
};
#define CURL_TLS13_PAD 174

static const uint8_t CURL_TLS12[] = {
	0x16, 0x03, 0x01, 0x00, 0xd6, 0x01, 0x00, 0x00, 0xd2, 0x03, 0x03, 0x7a,
	0x6a, 0x9f, 0x83, 0x81, 0x18, 0x94, 0x35, 0x49, 0xbd, 0x34, 0x65, 0xbc,
	0x44, 0x56, 0xf0, 0xde, 0x29, 0x68, 0x27, 0xc3, 0x58, 0x4b, 0xf7, 0x6d,
	0x52, 0x1b, 0x1b, 0x53, 0x46, 0x9b, 0xff, 0x00, 0x00, 0x38, 0xc0, 0x2c,
	0xc0, 0x30, 0x00, 0x9f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0xaa, 0xc0, 0x2b,
	0xc0, 0x2f, 0x00, 0x9e, 0xc0, 0x24, 0xc0, 0x28, 0x00, 0x6b, 0xc0, 0x23,
	0xc0, 0x27, 0x00, 0x67, 0xc0, 0x0a, 0xc0, 0x14, 0x00, 0x39, 0xc0, 0x09,
	0xc0, 0x13, 0x00, 0x33, 0x00, 0x9d, 0x00, 0x9c, 0x00, 0x3d, 0x00, 0x3c,
	0x00, 0x35, 0x00, 0x2f, 0x00, 0xff, 0x01, 0x00, 0x00, 0x71, 0x00, 0x00,
	0x00, 0x0d, 0x00, 0x0b, 0x00, 0x00, 0x08, 0x61, 0x2d, 0x62, 0x2e, 0x74,
	0x65, 0x73, 0x74, 0x00, 0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00,
	0x0a, 0x00, 0x0c, 0x00, 0x0a, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x1e, 0x00,
	0x19, 0x00, 0x18, 0x00, 0x10, 0x00, 0x0e, 0x00, 0x0c, 0x02, 0x68, 0x32,
	0x08, 0x68, 0x74, 0x74, 0x70, 0x2f, 0x31, 0x2e, 0x31, 0x00, 0x16, 0x00,
	0x00, 0x00, 0x17, 0x00, 0x00, 0x00, 0x0d, 0x00, 0x2a, 0x00, 0x28, 0x04,
	0x03, 0x05, 0x03, 0x06, 0x03, 0x08, 0x07, 0x08, 0x08, 0x08, 0x09, 0x08,
	0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08, 0x05, 0x08, 0x06, 0x04, 0x01, 0x05,
	0x01, 0x06, 0x01, 0x03, 0x03, 0x03, 0x01, 0x03, 0x02, 0x04, 0x02, 0x05,
	0x02, 0x06, 0x02,
};

static void tls_captured(void **state)
{
	(void)state;
	bytes b = {.n = 0};
	put(&b, CURL_TLS13, sizeof CURL_TLS13);
	fill(&b, 0, CURL_TLS13_PAD);
	assert_int_equal(b.n, 517);
	check(b.b, b.n, b.n, SNIFF_FOUND, "www.example.com", SNIFF_PROTO_TLS);
	check(CURL_TLS12, sizeof CURL_TLS12, sizeof CURL_TLS12, SNIFF_FOUND, "a-b.test",
	      SNIFF_PROTO_TLS);
}

/* Offsets in a one-record hello: record header 5, then msg_type 1,
 * length 3, legacy_version 2, random 32, session id length. */
#define OFF_SID (5 + 4 + 2 + 32)
#define OFF_SUITES (OFF_SID + 1 + 32)
#define OFF_METHODS (OFF_SUITES + 2 + 28)
#define OFF_EXTS (OFF_METHODS + 2)

static void mutate(const hello *h, size_t off, uint8_t v, size_t at)
{
	client_hello(&hs, h);
	records(&rec, &hs, 16384);
	rec.b[off] = v;
	check(rec.b, rec.n, at, SNIFF_NONE, NULL, 0);
}

static void tls_malformed(void **state)
{
	(void)state;
	hello h = {.sni = "ok.example", .before = 3};
	mutate(&h, 1, 0x02, 2);               /* record version 2.x */
	mutate(&h, 5, 0x02, 6);               /* a ServerHello, not a ClientHello */
	mutate(&h, 9, 0x02, 11);              /* legacy_version 2.x */
	mutate(&h, OFF_SID, 33, OFF_SID + 1); /* session id over 32 */
	mutate(&h, OFF_SUITES + 1, 27, OFF_SUITES + 2);   /* odd cipher_suites */
	mutate(&h, OFF_SUITES + 1, 0, OFF_SUITES + 2);    /* empty cipher_suites */
	mutate(&h, OFF_METHODS, 0, OFF_METHODS + 1);      /* no compression method */
	mutate(&h, OFF_EXTS + 1, 0x07, OFF_EXTS + 2);     /* extensions shorter than the rest */
	mutate(&h, OFF_EXTS, 0xff, OFF_EXTS + 2);         /* extensions longer than the hello */
	mutate(&h, OFF_EXTS + 4, 0xff, OFF_EXTS + 6);     /* first extension overruns */

	/* record length 0, and over 2^14 */
	uint8_t empty[] = {0x16, 0x03, 0x01, 0x00, 0x00, 0x01};
	check(empty, sizeof empty, 5, SNIFF_NONE, NULL, 0);
	uint8_t huge[] = {0x16, 0x03, 0x01, 0x40, 0x01, 0x01};
	check(huge, sizeof huge, 5, SNIFF_NONE, NULL, 0);

	/* an alert record in the middle of the hello (RFC 8446 5.1 forbids interleaving) */
	client_hello(&hs, &h);
	two_records(&rec, &hs, 50);
	rec.b[5 + 50] = 21;
	check(rec.b, rec.n, 5 + 50 + 1, SNIFF_NONE, NULL, 0);
	/* and a zero-length second record */
	two_records(&rec, &hs, 50);
	rec.b[5 + 50 + 3] = 0;
	rec.b[5 + 50 + 4] = 0;
	check(rec.b, rec.n, 5 + 50 + 5, SNIFF_NONE, NULL, 0);
	/* SSL 2 compatible hello: no 0x16 */
	uint8_t v2[] = {0x80, 0x2e, 0x01, 0x03, 0x01};
	check(v2, sizeof v2, 1, SNIFF_NONE, NULL, 0);
}

static void tls_server_name_contents(void **state)
{
	(void)state;
	/* two server_name extensions, two host_names in one list */
	check_hello(&(hello){.sni = "a.example", .sni_twice = true}, SNIFF_NONE, NULL);
	static const uint8_t two[] = {0x00, 0x0a, 0x00, 0x00, 0x01, 'a', 0x00, 0x00, 0x02, 'b', 'c'};
	check_hello(&(hello){.sni_raw = two, .sni_raw_len = sizeof two - 1}, SNIFF_NONE, NULL);
	/* another name type first is skipped by its length; the host_name counts */
	static const uint8_t other[] = {0x00, 0x0c, 0x07, 0x00, 0x03, 'x', 'y', 'z',
	                                0x00, 0x00, 0x03, 'a', '.', 'b'};
	check_hello(&(hello){.sni_raw = other, .sni_raw_len = sizeof other}, SNIFF_FOUND, "a.b");
	/* only another type */
	check_hello(&(hello){.sni_raw = other, .sni_raw_len = 8}, SNIFF_NONE, NULL);
	/* empty extension, empty list, an empty name, a list longer than the extension */
	check_hello(&(hello){.sni_raw = other, .sni_raw_len = 0}, SNIFF_NONE, NULL);
	static const uint8_t empty_list[] = {0x00, 0x00};
	check_hello(&(hello){.sni_raw = empty_list, .sni_raw_len = 2}, SNIFF_NONE, NULL);
	static const uint8_t empty_name[] = {0x00, 0x03, 0x00, 0x00, 0x00};
	check_hello(&(hello){.sni_raw = empty_name, .sni_raw_len = 5}, SNIFF_NONE, NULL);
	static const uint8_t long_list[] = {0x00, 0x07, 0x00, 0x00, 0x03, 'a', '.', 'b'};
	check_hello(&(hello){.sni_raw = long_list, .sni_raw_len = 8}, SNIFF_NONE, NULL);
	static const uint8_t short_name[] = {0x00, 0x06, 0x00, 0x00, 0x04, 'a', '.', 'b'};
	check_hello(&(hello){.sni_raw = short_name, .sni_raw_len = 8}, SNIFF_NONE, NULL);
	static const uint8_t stub[] = {0x00, 0x02, 0x00, 0x00}; /* too short for an entry */
	check_hello(&(hello){.sni_raw = stub, .sni_raw_len = 4}, SNIFF_NONE, NULL);
}

/* ---- names ---- */

static void names(void **state)
{
	(void)state;
	char l63[64], l64[65], n253[300], n254[300], n254dot[400], n300[301];
	memset(l63, 'a', 63);
	l63[63] = '\0';
	memset(l64, 'b', 64);
	l64[64] = '\0';
	/* 253 characters: three labels of 63 and one of 61, with dots */
	snprintf(n253, sizeof n253, "%s.%s.%s.%.61s", l63, l63, l63, l64);
	assert_int_equal(strlen(n253), 253);
	snprintf(n254, sizeof n254, "%s.%s.%s.%.62s", l63, l63, l63, l64);
	assert_int_equal(strlen(n254), 254);
	snprintf(n254dot, sizeof n254dot, "%s.", n253);
	memset(n300, 'e', 300); /* past the longest name even with a dot: refused unread */
	n300[300] = '\0';

	struct {
		const char *in, *out; /* out NULL: no name */
	} cases[] = {
		{"example.com", "example.com"},
		{"EXAMPLE.com.", "example.com"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"a-b--c.d", "a-b--c.d"},
		{"1.2.3.4.example", "1.2.3.4.example"},
		{"4.example.123a", "4.example.123a"},
		{"0x.example", "0x.example"},
		{l63, l63},
		{n253, n253},
		{n254dot, n253},
		/* IP literals: IPv4 in any form a URL parser takes, and IPv6 */
		{"192.0.2.1", NULL},
		{"192.0.2.1.", NULL},
		{"example.123", NULL},
		{"0x7f000001", NULL},
		{"a.0Xff", NULL},
		{"a.0x", NULL},
		{"2130706433", NULL},
		{"[::1]", NULL},
		/* lengths */
		{l64, NULL},
		{n254, NULL},
		{n300, NULL},
		{"", NULL},
		/* labels and characters */
		{".", NULL},
		{"a..b", NULL},
		{".a", NULL},
		{"a.b..", NULL},
		{"-a.example", NULL},
		{"a-.example", NULL},
		{"exa mple.com", NULL},
		{"a.com/x", NULL},
		{"a*.com", NULL},
		{"b\xc3\xbc" "cher.example", NULL}, /* UTF-8, not an A-label */
		{"a%2e.com", NULL},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const char *in = cases[i].in, *out = cases[i].out;
		sniff_result want = out != NULL ? SNIFF_FOUND : SNIFF_NONE;
		check_hello(&(hello){.sni = in, .before = i % N_COMMON}, want, out);
		if (strpbrk(in, " \r\n") != NULL)
			continue;
		char req[1024];
		int k = snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", in);
		assert_true(k > 0 && (size_t)k < sizeof req);
		check_str(req, want == SNIFF_FOUND ? (size_t)k : ANY, want, out);
	}
}

/* A name buffer too small for the name loses it rather than cutting it. */
static void name_size(void **state)
{
	(void)state;
	const char *req = "GET / HTTP/1.1\r\nHost: abc.example\r\n\r\n";
	char name[12];
	sniff_proto proto = SNIFF_PROTO_NONE;
	assert_int_equal(sniff_name((const uint8_t *)req, strlen(req), name, 11, &proto), SNIFF_NONE);
	assert_int_equal(proto, SNIFF_PROTO_NONE);
	assert_int_equal(sniff_name((const uint8_t *)req, strlen(req), name, 12, &proto), SNIFF_FOUND);
	assert_string_equal(name, "abc.example");
	assert_int_equal(proto, SNIFF_PROTO_HTTP);
}

/* ---- HTTP ---- */

static void http_host(void **state)
{
	(void)state;
	const char *const found[][2] = {
		{"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", "example.com"},
		{"GET / HTTP/1.1\r\nHost: Example.com:8080\r\n\r\n", "example.com"},
		{"GET / HTTP/1.1\r\nhOsT:example.com:\r\n\r\n", "example.com"},
		{"GET / HTTP/1.1\r\nHost: \t www.example.net \t\r\n\r\n", "www.example.net"},
		{"POST /form?a=b HTTP/1.0\r\nUser-Agent: x\r\nHOST: a.example\r\nAccept: */*\r\n"
		 "Content-Length: 5\r\n\r\nhello",
		 "a.example"},
		{"HEAD * HTTP/1.1\r\nX-Host: decoy.example\r\nHost: real.example:443\r\n\r\n",
		 "real.example"},
		{"CONNECT tunnel.example:443 HTTP/1.1\r\nHost: tunnel.example:443\r\n\r\n",
		 "tunnel.example"},
		{"GET / HTTP/1.1\r\nEmpty:\r\nObs-Text: \xff\x80\r\nHost: x.example\r\n\r\n",
		 "x.example"},
		/* curl 7.88's own request, captured */
		{"GET /x HTTP/1.1\r\nHost: Web.Example.net:8080\r\nUser-Agent: curl/7.88.1\r\n"
		 "Accept: */*\r\n\r\n",
		 "web.example.net"},
	};
	for (size_t i = 0; i < sizeof found / sizeof found[0]; i++) {
		const char *s = found[i][0];
		const char *end = strstr(s, "\r\n\r\n");
		check_str(s, (size_t)(end - s) + 4, SNIFF_FOUND, found[i][1]);
	}
}

/* An absolute-form target names the host, and Host is ignored (RFC 9112 3.2.2). */
static void http_absolute_form(void **state)
{
	(void)state;
	const char *const found[][2] = {
		{"GET http://Target.example/path HTTP/1.1\r\nHost: other.example\r\n\r\n",
		 "target.example"},
		{"GET http://target.example HTTP/1.1\r\n\r\n", "target.example"},
		{"GET https://target.example:8443?q HTTP/1.0\r\n\r\n", "target.example"},
		{"OPTIONS ftp://files.example/#x HTTP/1.1\r\nHost: files.example\r\n\r\n",
		 "files.example"},
	};
	for (size_t i = 0; i < sizeof found / sizeof found[0]; i++) {
		const char *s = found[i][0];
		const char *end = strstr(s, "\r\n\r\n");
		check_str(s, (size_t)(end - s) + 4, SNIFF_FOUND, found[i][1]);
	}
	const char *const none[] = {
		"GET http://192.0.2.1/ HTTP/1.1\r\nHost: name.example\r\n\r\n",
		"GET http://user@target.example/ HTTP/1.1\r\nHost: target.example\r\n\r\n",
		"GET http://good.example@evil.example/ HTTP/1.1\r\n\r\n",
		"GET http://[2001:db8::1]:80/ HTTP/1.1\r\nHost: name.example\r\n\r\n",
		"GET http:///nohost HTTP/1.1\r\nHost: name.example\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
		check_str(none[i], strlen(none[i]), SNIFF_NONE, NULL);
}

static void http_no_name(void **state)
{
	(void)state;
	/* decided when the head is complete */
	const char *const at_end[] = {
		"GET / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.0\r\nUser-Agent: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.example:65536\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.example:080x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.example:000080\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: u@a.example\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a.example b.example\r\n\r\n",
		"GET authority.example:443 HTTP/1.1\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof at_end / sizeof at_end[0]; i++)
		check_str(at_end[i], strlen(at_end[i]), SNIFF_NONE, NULL);

	/* decided at the byte that breaks the head */
	const struct {
		const char *s;
		size_t at;
	} early[] = {
		{"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", 50},
		{"GET / HTTP/1.1\r\nHost : a.example\r\n\r\n", 21},   /* space before colon */
		{"GET / HTTP/1.1\r\nX: y\r\n folded\r\nHost: a.example\r\n\r\n", 23}, /* obs-fold */
		{"GET / HTTP/1.1\nHost: a.example\r\n\r\n", 15},      /* bare LF */
		{"GET / HTTP/1.1\r\nHost: a.example\n\r\n", 32},
		{"GET / HTTP/1.1\r\nHost: a.\x01.example\r\n\r\n", 25},
		{"GET / HTTP/2.0\r\nHost: a.example\r\n\r\n", 12},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 12},               /* HTTP/2 preface */
		{"GET / HTTPS/1.1\r\n\r\n", 11},
		{"GET  / HTTP/1.1\r\n\r\n", 5},
		{"GET /\x7f HTTP/1.1\r\n\r\n", 6},
		{"GET / HTTP/1.x\r\n\r\n", 14},
		{"get / HTTP/1.1\r\nHost: a.example\r\n\r\n", 1},       /* methods are case-sensitive */
		{"Get / HTTP/1.1\r\nHost: a.example\r\n\r\n", 2},
		{"ABCDEFGHIJKLMNOPQRSTUVWXYZ / HTTP/1.1\r\n", 25},       /* method over 24 */
		{"SSH-2.0-OpenSSH_9.6\r\n", 5},
		{"GET / HTTP/1.1\r\n: x\r\n\r\n", 17},                   /* empty field name */
	};
	for (size_t i = 0; i < sizeof early / sizeof early[0]; i++)
		check_str(early[i].s, early[i].at, SNIFF_NONE, NULL);

	/* an incomplete head never answers */
	check_str("GET / HTTP/1.1\r\nHost: a.example\r\n", ANY, SNIFF_NEED_MORE, NULL);
	/* the longest method is fine */
	check_str("ABCDEFGHIJKLMNOPQRSTUVWX / HTTP/1.1\r\nHost: m.example\r\n\r\n", ANY,
	          SNIFF_FOUND, "m.example");
}

/* ---- other bytes ---- */

static void garbage(void **state)
{
	(void)state;
	static const struct {
		const uint8_t *b;
		size_t n;
	} cases[] = {
		{(const uint8_t *)"\x05\x01\x00", 3},        /* SOCKS5 greeting */
		{(const uint8_t *)"\x00\x00\x00\x00", 4},
		{(const uint8_t *)"\xff\x16\x03\x01", 4},
		{(const uint8_t *)"SSH", 3},
		{(const uint8_t *)"\r\nGET / HTTP/1.1\r\n", 18},
		{(const uint8_t *)" GET / HTTP/1.1\r\n", 17},
		{(const uint8_t *)"\x17\x03\x03\x00\x10", 5}, /* application data record */
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		size_t at = cases[i].b[0] >= 'A' && cases[i].b[0] <= 'Z' ? ANY : 1;
		check(cases[i].b, cases[i].n, at, SNIFF_NONE, NULL, 0);
	}
	/* nothing yet */
	char name[SNIFF_NAME_MAX + 1];
	sniff_proto proto;
	assert_int_equal(sniff_name(NULL, 0, name, sizeof name, &proto), SNIFF_NEED_MORE);
}

/* ---- the byte bound ---- */

static void bound_tls(void **state)
{
	(void)state;
	/* a hello that ends exactly at SNIFF_MAX_BYTES is taken */
	hello h = {.sni = "edge.example", .before = 4, .pq_share = 1216};
	client_hello(&hs, &h);
	h.pad = SNIFF_MAX_BYTES - 5 - hs.n - 4;
	client_hello(&hs, &h);
	records(&rec, &hs, 16384);
	assert_int_equal(rec.n, SNIFF_MAX_BYTES);
	check(rec.b, rec.n, rec.n, SNIFF_FOUND, "edge.example", SNIFF_PROTO_TLS);
	/* one byte more is refused as soon as its length is known */
	h.pad++;
	client_hello(&hs, &h);
	records(&rec, &hs, 16384);
	check(rec.b, rec.n, 9, SNIFF_NONE, NULL, 0);
	/* a hello that fits but whose record headers push it past the bound is
	 * given up at the bound, and stays given up when the rest arrives */
	h = (hello){.sni = "edge.example", .before = 4, .pq_share = 1216, .pad = 5000};
	client_hello(&hs, &h);
	records(&rec, &hs, 8);
	assert_true(5 + hs.n <= SNIFF_MAX_BYTES && rec.n > SNIFF_MAX_BYTES);
	check(rec.b, rec.n, SNIFF_MAX_BYTES, SNIFF_NONE, NULL, 0);
}

static void bound_http(void **state)
{
	(void)state;
	static char req[SNIFF_MAX_BYTES + 64];
	const char *head = "GET / HTTP/1.1\r\nHost: big.example\r\nCookie: ";
	size_t hn = strlen(head);
	/* a head that ends exactly at SNIFF_MAX_BYTES */
	memcpy(req, head, hn);
	memset(req + hn, 'c', SNIFF_MAX_BYTES - hn - 4);
	memcpy(req + SNIFF_MAX_BYTES - 4, "\r\n\r\n", 5);
	check_str(req, SNIFF_MAX_BYTES, SNIFF_FOUND, "big.example");
	/* one byte longer: given up at the bound */
	memset(req + hn, 'c', SNIFF_MAX_BYTES - hn - 3);
	memcpy(req + SNIFF_MAX_BYTES - 3, "\r\n\r\n", 5);
	check_str(req, SNIFF_MAX_BYTES, SNIFF_NONE, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tls_plain),
		cmocka_unit_test(tls_many_extensions_first),
		cmocka_unit_test(tls_no_name),
		cmocka_unit_test(tls_records),
		cmocka_unit_test(tls_captured),
		cmocka_unit_test(tls_malformed),
		cmocka_unit_test(tls_server_name_contents),
		cmocka_unit_test(names),
		cmocka_unit_test(name_size),
		cmocka_unit_test(http_host),
		cmocka_unit_test(http_absolute_form),
		cmocka_unit_test(http_no_name),
		cmocka_unit_test(garbage),
		cmocka_unit_test(bound_tls),
		cmocka_unit_test(bound_http),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
