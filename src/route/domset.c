/* domset.c - domain matcher sets: a suffix hash table, a keyword index, compiled PCRE2 patterns. */
#include "route/domset.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/hash.h"
#include "base/vec.h"
#include "route/route_msg.h"

/* Flags of a stored name; 0 marks an empty slot. */
enum {
	F_FULL = 1,   /* domain, geosite Full: the name itself */
	F_SUFFIX = 2, /* domain_suffix, geosite RootDomain: the name or a name under it */
	F_SUB = 4,    /* domain_suffix with a leading dot: only names under it */
};

/* Up to this many keywords are tested one memmem each; above it the
 * two-byte index pays for its 8 KiB. */
#define KW_LINEAR_MAX 4

/* Below this many names the table itself stays in cache and a filter would
 * only add a step. 16 bits per name: about 6% of absent suffixes still probe. */
#define FILTER_MIN 512
#define FILTER_BITS_PER_NAME 16

/* Open addressing slot: the top 32 bits of the hash rule out almost every
 * mismatch before a memcmp. */
typedef struct dslot {
	uint32_t tag;
	uint32_t off; /* into pool */
	uint8_t len;  /* names are at most DOMSET_NAME_MAX bytes */
	uint8_t flags;
} dslot;

typedef struct kw {
	uint32_t off, len; /* into pool */
} kw;

struct pending {
	char *text;       /* owned */
	pcre2_code *code; /* owned, compiled alone, not JIT-compiled yet */
};

struct domset {
	dslot *slots; /* cap entries, a power of two, at most half full */
	size_t cap, used;
	/* After sealing a set of FILTER_MIN names or more: one bit per hash,
	 * FILTER_BITS_PER_NAME bits per name, so a suffix that is in no list
	 * (most of them) costs a bit test in a few KiB instead of a probe into a
	 * table too big for the L1 and L2 caches. */
	uint64_t *filter;
	size_t filter_mask; /* bits - 1 */
	char *pool; /* every name and keyword, lowercased, back to back */
	size_t pool_len, pool_cap;
	kw *kws;
	size_t nkw, kw_cap;
	/* After sealing with more than KW_LINEAR_MAX keywords: */
	bool kw_any;          /* an empty keyword: every name matches */
	bool has_singles;
	uint64_t singles[4];  /* bytes that are one-byte keywords */
	uint64_t *pairs;      /* first two bytes of the longer keywords, 65536 bits */
	size_t nkw2;          /* kws[0..nkw2) are those, sorted */
	/* Regexes: added to pend (compiled alone, to report a bad one at once);
	 * sealing moves them to run, combined where that is exact (seal_regexes). */
	struct pending *pend;
	size_t npend, pend_cap;
	size_t nre; /* patterns added */
	pcre2_code **run;
	bool *jit; /* run[i] was JIT-compiled */
	size_t nrun;
};

/* The hash of a name is taken over 8-byte words aligned from its END, so
 * every suffix of a candidate shares the words to its right: one pass over
 * the candidate gives the state after each whole word, and each suffix adds
 * at most its one partial leading word. The multiply chain is then len/8
 * long instead of len, which is most of what preparing a name costs.
 * Lookups never insert, so a client cannot lengthen probe chains. */
#define HASH_SEED 0x243f6a8885a308d3ull
#define HASH_MUL 0x9e3779b97f4a7c15ull

static uint64_t word_at(const char *p)
{
	uint64_t w;
	memcpy(&w, p, sizeof w);
	return w;
}

static uint64_t mixw(uint64_t h, uint64_t w)
{
	h = (h ^ w) * HASH_MUL;
	return h ^ h >> 32;
}


/* st[j]: the state after the j whole words at the end of name (j <= len/8). */
static void words(const char *name, size_t len, uint64_t *st)
{
	st[0] = HASH_SEED;
	for (size_t j = 1; j <= len / 8; j++)
		st[j] = mixw(st[j - 1], word_at(name + len - 8 * j));
}

/* The hash of name + off. Reads up to 8 bytes before name + off, which the
 * caller's buffer must hold (the bytes outside the suffix are shifted out). */
static uint64_t suffix_hash(const char *name, size_t len, size_t off, const uint64_t *st)
{
	size_t n = len - off, r = n % 8;
	uint64_t h = st[n / 8];
	if (r)
		h = mixw(h, word_at(name + off + r - 8) >> (8 * (8 - r)));
	return hash_fmix64(h ^ n); /* spread over the bits the table indexes by */
}

static uint64_t key_hash(const char *key, size_t len)
{
	char buf[8 + DOMSET_NAME_MAX] = {0};
	uint64_t st[DOMSET_NAME_MAX / 8 + 1];
	memcpy(buf + 8, key, len);
	words(buf + 8, len, st);
	return suffix_hash(buf + 8, len, 0, st);
}

static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

/* ASCII-lowercases eight bytes at once: a byte gets 0x20 when its low seven
 * bits are 'A'..'Z' and its top bit is clear. No sum carries across bytes
 * (each is at most 0x7f + 0x3f). */
static uint64_t lower8(uint64_t w)
{
	const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
	uint64_t low7 = w & ~high;
	uint64_t ge_a = low7 + ones * (0x80 - 'A');
	uint64_t gt_z = low7 + ones * (0x80 - 'Z' - 1);
	return w | ((ge_a & ~gt_z & ~w & high) >> 2);
}

bool domset_name_prepare(domset_name *n, const char *name, size_t len)
{
	if (len > 0 && name[len - 1] == '.')
		len--;
	if (len == 0 || len > DOMSET_NAME_MAX)
		return false;
	char *d = n->pad + 8;
	memset(n->pad, 0, 8);
	memcpy(d, name, len);
	memset(d + len, 0, 8); /* the terminator, and defined bytes for the last word */
	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = lower8(word_at(d + i));
		memcpy(d + i, &w, sizeof w);
	}
	n->name = d;
	n->len = (uint16_t)len;

	uint64_t st[DOMSET_NAME_MAX / 8 + 1];
	words(d, len, st);
	/* A suffix starts at 0 or right after a dot, and never at an empty
	 * label ("a..b"): at most one start per two bytes, DOMSET_SUFFIX_MAX. */
	n->off[0] = 0;
	n->hash[0] = suffix_hash(d, len, 0, st);
	n->nsuf = 1;
	for (const char *p = d; (p = memchr(p, '.', len - (size_t)(p - d))) != NULL;) {
		p++;
		size_t i = (size_t)(p - d);
		if (i >= len)
			break;
		if (*p != '.') {
			n->off[n->nsuf] = (uint8_t)i;
			n->hash[n->nsuf++] = suffix_hash(d, len, i, st);
		}
	}
	return true;
}

domset *domset_new(void) { return calloc(1, sizeof(domset)); }

void domset_del(domset *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->npend; i++) {
		free(s->pend[i].text);
		pcre2_code_free(s->pend[i].code);
	}
	free(s->pend);
	for (size_t i = 0; i < s->nrun; i++)
		pcre2_code_free(s->run[i]);
	free(s->run);
	free(s->jit);
	free(s->slots);
	free(s->filter);
	free(s->pool);
	free(s->kws);
	free(s->pairs);
	free(s);
}

/* Copies text lowercased into the pool; -1 when memory runs out or the pool
 * would pass the 4 GiB its 32-bit offsets reach. */
static int pool_put(domset *s, const char *text, size_t len, uint32_t *off)
{
	if (s->pool_len + len > UINT32_MAX)
		return -1;
	if (vec_reserve(&s->pool, &s->pool_cap, s->pool_len, len) < 0)
		return -1;
	for (size_t i = 0; i < len; i++)
		s->pool[s->pool_len + i] = lower(text[i]);
	*off = (uint32_t)s->pool_len;
	s->pool_len += len;
	return 0;
}

static dslot *probe(dslot *slots, size_t cap, uint64_t h, const char *pool, const char *key,
                    size_t len)
{
	size_t mask = cap - 1;
	uint32_t tag = (uint32_t)(h >> 32);
	for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
		dslot *e = &slots[i];
		if (e->flags == 0 ||
		    (e->tag == tag && e->len == len && memcmp(pool + e->off, key, len) == 0))
			return e;
	}
}

static int rehash(domset *s, size_t cap)
{
	dslot *slots = calloc(cap, sizeof(dslot));
	if (!slots)
		return -1;
	for (size_t i = 0; i < s->cap; i++) {
		const dslot *e = &s->slots[i];
		if (e->flags == 0)
			continue;
		uint64_t h = key_hash(s->pool + e->off, e->len);
		*probe(slots, cap, h, s->pool, s->pool + e->off, e->len) = *e;
	}
	free(s->slots);
	s->slots = slots;
	s->cap = cap;
	return 0;
}

static int name_put(domset *s, const char *name, size_t len, uint8_t flag)
{
	if (len > 0 && name[len - 1] == '.')
		len--;
	if (len == 0 || len > DOMSET_NAME_MAX)
		return 0; /* no candidate can equal it */
	if (s->used + 1 > s->cap / 2) {
		if (s->cap > SIZE_MAX / 4 || rehash(s, s->cap ? s->cap * 2 : 16) < 0)
			return -1;
	}
	char low[DOMSET_NAME_MAX];
	for (size_t i = 0; i < len; i++)
		low[i] = lower(name[i]);
	uint64_t h = key_hash(low, len);
	dslot *e = probe(s->slots, s->cap, h, s->pool, low, len);
	if (e->flags == 0) {
		uint32_t off;
		if (pool_put(s, low, len, &off) < 0)
			return -1;
		*e = (dslot){(uint32_t)(h >> 32), off, (uint8_t)len, 0};
		s->used++;
	}
	e->flags |= flag;
	return 0;
}

int domset_add_full(domset *s, const char *name, size_t len)
{
	return name_put(s, name, len, F_FULL);
}

int domset_add_suffix(domset *s, const char *name, size_t len)
{
	if (len > 0 && name[0] == '.')
		return name_put(s, name + 1, len - 1, F_SUB);
	return name_put(s, name, len, F_SUFFIX);
}

int domset_add_keyword(domset *s, const char *text, size_t len)
{
	if (len > DOMSET_NAME_MAX)
		return 0; /* longer than any candidate */
	if (vec_reserve(&s->kws, &s->kw_cap, s->nkw, 1) < 0)
		return -1;
	uint32_t off;
	if (pool_put(s, text, len, &off) < 0)
		return -1;
	s->kws[s->nkw++] = (kw){off, (uint32_t)len};
	return 0;
}

/* ---- regexes ---- */

static pthread_once_t re_once = PTHREAD_ONCE_INIT;
static pthread_key_t md_key;
static bool md_key_ok;
/* Read-only after re_init: one match limit for every pattern and thread. */
static pcre2_match_context *mctx;
/* One match data per thread, so matching allocates nothing after a thread's
 * first regex; freed by the key's destructor when the thread exits. */
static _Thread_local pcre2_match_data *tl_md;

static void md_free(void *md) { pcre2_match_data_free(md); }

static void re_init(void)
{
	md_key_ok = pthread_key_create(&md_key, md_free) == 0;
	mctx = pcre2_match_context_create(NULL);
	if (mctx)
		pcre2_set_match_limit(mctx, DOMSET_REGEX_MATCH_LIMIT);
}

static pcre2_match_data *match_data(void)
{
	if (tl_md)
		return tl_md;
	pthread_once(&re_once, re_init);
	/* One pair: only whether a pattern matches is asked, never where. */
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	if (md && md_key_ok && pthread_setspecific(md_key, md) != 0) {
		pcre2_match_data_free(md);
		md = NULL;
	}
	tl_md = md;
	return md;
}

static pcre2_code *compile(const char *pattern, char *reason, size_t reason_size)
{
	int code;
	PCRE2_SIZE off;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, 0, &code, &off,
	                               NULL);
	if (!re) {
		PCRE2_UCHAR text[256];
		if (pcre2_get_error_message(code, text, sizeof text) < 0)
			snprintf((char *)text, sizeof text, "error %d", code);
		route_msg_format(reason, reason_size, ROUTE_REGEX_REASON, (const char *)text,
		                 (size_t)off);
	}
	return re;
}

int domset_regex_check(const char *pattern, char *reason, size_t reason_size)
{
	pcre2_code *re = compile(pattern, reason, reason_size);
	if (!re)
		return -1;
	pcre2_code_free(re);
	return 0;
}

int domset_add_regex(domset *s, const char *pattern, char *reason, size_t reason_size)
{
	if (vec_reserve(&s->pend, &s->pend_cap, s->npend, 1) < 0)
		return -1;
	char *text = strdup(pattern);
	if (!text)
		return -1;
	pcre2_code *re = compile(pattern, reason, reason_size);
	if (!re) {
		free(text);
		return -2;
	}
	s->pend[s->npend++] = (struct pending){text, re};
	s->nre++;
	return 0;
}

/* Anchored patterns ("^ad[0-9]+\\.", the usual form in geosite lists) are
 * joined into one alternation per batch: the alternation is still
 * anchored, so one JIT call tries each branch once at the start of the
 * name, where separate calls would pay the call overhead per pattern
 * (measured: 4 patterns joined 22-35 ns, apart about 80 ns). Unanchored
 * patterns run apart: joined, they lose PCRE2's per-pattern start
 * optimisations and measured no faster. A batch stays far below PCRE2's
 * 64K-unit limit for domain patterns; one that does not compile just runs
 * its patterns apart. */
#define REGEX_BATCH 64

/* Whether pattern can be one branch "(?:pattern)" of an alternation and
 * match exactly what it matches alone. Nothing in it may name a group by
 * number or name (the numbers shift; names may clash), recurse, call a
 * subroutine, use a backtracking verb (a (*COMMIT) would cut off the other
 * branches), quote with \Q (the closing parenthesis would be quoted), or
 * hold '#' or a newline (an extended-mode comment could swallow it).
 * Conservative: such a sequence anywhere, even where it is harmless, keeps
 * the pattern on its own, which is always exact. */
static bool combinable(const char *p)
{
	for (; *p; p++) {
		if (*p == '#' || *p == '\n')
			return false;
		if (*p == '\\') {
			char c = p[1];
			if (c == '\0' || (c >= '0' && c <= '9') || c == 'g' || c == 'k' || c == 'Q')
				return false;
			p++;
			continue;
		}
		if (*p != '(' || (p[1] != '?' && p[1] != '*'))
			continue;
		if (p[1] == '*')
			return false;
		const char *q = p + 2;
		if (*q == ':' || *q == '=' || *q == '!' || *q == '>' || *q == '|')
			continue; /* non-capturing, lookahead, atomic, branch reset */
		if (*q == '<' && (q[1] == '=' || q[1] == '!'))
			continue; /* lookbehind */
		while (*q && strchr("imnsxJU-^", *q))
			q++;
		if (q == p + 2 || (*q != ':' && *q != ')'))
			return false; /* named groups, recursion, conditionals, callouts, ... */
	}
	return true;
}

static void add_run(domset *s, pcre2_code *re)
{
	/* Without JIT (no executable memory allowed, say) the interpreter gives
	 * the same answers, only slower. */
	s->jit[s->nrun] = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
	s->run[s->nrun++] = re;
}

/* Runs the patterns pend[from..to) (all anchored and combinable) as one
 * alternation, or apart when the alternation does not compile or, against
 * expectation, is not anchored. */
static void seal_batch(domset *s, size_t from, size_t to)
{
	pcre2_code *re = NULL;
	if (to - from > 1) {
		size_t len = 1;
		for (size_t i = from; i < to; i++)
			len += strlen(s->pend[i].text) + 5;
		char *text = malloc(len), *w = text;
		for (size_t i = from; text && i < to; i++) {
			size_t n = strlen(s->pend[i].text);
			memcpy(w, i > from ? "|(?:" : "(?:", i > from ? 4 : 3);
			w += i > from ? 4 : 3;
			memcpy(w, s->pend[i].text, n);
			w += n;
			*w++ = ')';
		}
		if (text) {
			*w = '\0';
			char reason[8];
			re = compile(text, reason, sizeof reason);
			free(text);
		}
	}
	uint32_t opts = 0;
	if (re && (pcre2_pattern_info(re, PCRE2_INFO_ALLOPTIONS, &opts) != 0 ||
	           !(opts & PCRE2_ANCHORED))) {
		pcre2_code_free(re);
		re = NULL;
	}
	if (re) {
		add_run(s, re);
		for (size_t i = from; i < to; i++)
			pcre2_code_free(s->pend[i].code);
	} else {
		for (size_t i = from; i < to; i++)
			add_run(s, s->pend[i].code);
	}
	for (size_t i = from; i < to; i++)
		s->pend[i].code = NULL;
}

static int seal_regexes(domset *s)
{
	if (s->npend == 0)
		return 0;
	s->run = malloc(s->npend * sizeof *s->run);
	s->jit = malloc(s->npend * sizeof *s->jit);
	if (!s->run || !s->jit)
		return -1;
	/* Anchored, combinable patterns to the front, keeping their order. */
	size_t nc = 0;
	for (size_t i = 0; i < s->npend; i++) {
		uint32_t opts = 0;
		(void)pcre2_pattern_info(s->pend[i].code, PCRE2_INFO_ALLOPTIONS, &opts);
		if ((opts & PCRE2_ANCHORED) && combinable(s->pend[i].text)) {
			struct pending p = s->pend[i];
			memmove(&s->pend[nc + 1], &s->pend[nc], (i - nc) * sizeof *s->pend);
			s->pend[nc++] = p;
		}
	}
	for (size_t i = 0; i < nc; i += REGEX_BATCH)
		seal_batch(s, i, i + REGEX_BATCH < nc ? i + REGEX_BATCH : nc);
	for (size_t i = nc; i < s->npend; i++) {
		add_run(s, s->pend[i].code);
		s->pend[i].code = NULL;
	}
	for (size_t i = 0; i < s->npend; i++)
		free(s->pend[i].text);
	free(s->pend);
	s->pend = NULL;
	s->npend = s->pend_cap = 0;
	return 0;
}

/* ---- sealing and matching ---- */

static int kw_cmp(const void *a, const void *b, void *pool)
{
	const kw *x = a, *y = b;
	const char *p = pool;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(p + x->off, p + y->off, n);
	return c ? c : (x->len > y->len) - (x->len < y->len);
}

static void bit_set(uint64_t *bits, size_t i) { bits[i / 64] |= 1ull << (i % 64); }

static bool bit_get(const uint64_t *bits, size_t i) { return bits[i / 64] >> (i % 64) & 1; }

static unsigned pair_at(const char *p) { return (unsigned)(uint8_t)p[0] << 8 | (uint8_t)p[1]; }

/* The filter bit of hash h: bits the table's slot index does not use. */
static size_t filter_bit(const domset *s, uint64_t h) { return (size_t)(h >> 24) & s->filter_mask; }

static int seal_filter(domset *s)
{
	if (s->used < FILTER_MIN || s->filter)
		return 0;
	size_t bits = 64;
	while (bits < s->used * FILTER_BITS_PER_NAME)
		bits *= 2;
	s->filter = calloc(bits / 64, sizeof(uint64_t));
	if (!s->filter)
		return -1;
	s->filter_mask = bits - 1;
	for (size_t i = 0; i < s->cap; i++) {
		const dslot *e = &s->slots[i];
		if (e->flags)
			bit_set(s->filter, filter_bit(s, key_hash(s->pool + e->off, e->len)));
	}
	return 0;
}

int domset_seal(domset *s)
{
	if (seal_regexes(s) < 0 || seal_filter(s) < 0)
		return -1;
	if (s->nkw <= KW_LINEAR_MAX || s->pairs)
		return 0;
	s->pairs = calloc(65536 / 64, sizeof(uint64_t));
	if (!s->pairs)
		return -1;
	/* Keep the keywords of two bytes or more at the front, sorted, so the
	 * ones sharing their first two bytes are one run. */
	size_t n2 = 0;
	for (size_t i = 0; i < s->nkw; i++) {
		kw k = s->kws[i];
		if (k.len == 0) {
			s->kw_any = true;
		} else if (k.len == 1) {
			bit_set(s->singles, (uint8_t)s->pool[k.off]);
			s->has_singles = true;
		} else {
			bit_set(s->pairs, pair_at(s->pool + k.off));
			s->kws[n2++] = k;
		}
	}
	qsort_r(s->kws, n2, sizeof(kw), kw_cmp, s->pool);
	s->nkw2 = n2;
	return 0;
}

static bool names_match(const domset *s, const domset_name *n)
{
	for (unsigned k = 0; k < n->nsuf; k++) {
		if (s->filter && !bit_get(s->filter, filter_bit(s, n->hash[k])))
			continue;
		size_t off = n->off[k], len = n->len - off;
		const dslot *e = probe(s->slots, s->cap, n->hash[k], s->pool, n->name + off, len);
		if (e->flags & (off == 0 ? F_FULL | F_SUFFIX : F_SUFFIX | F_SUB))
			return true;
	}
	return false;
}

/* The keywords starting with the two bytes at p, tested at p. */
static bool pair_match(const domset *s, const char *p, size_t room)
{
	unsigned want = pair_at(p);
	size_t lo = 0, hi = s->nkw2;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (pair_at(s->pool + s->kws[mid].off) < want)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < s->nkw2 && pair_at(s->pool + s->kws[lo].off) == want; lo++) {
		const kw *k = &s->kws[lo];
		if (k->len <= room && memcmp(p, s->pool + k->off, k->len) == 0)
			return true;
	}
	return false;
}

static bool keywords_match(const domset *s, const domset_name *n)
{
	if (!s->pairs) {
		for (size_t i = 0; i < s->nkw; i++)
			if (s->kws[i].len == 0 ||
			    memmem(n->name, n->len, s->pool + s->kws[i].off, s->kws[i].len))
				return true;
		return false;
	}
	if (s->kw_any)
		return true;
	if (s->has_singles)
		for (size_t i = 0; i < n->len; i++)
			if (bit_get(s->singles, (uint8_t)n->name[i]))
				return true;
	unsigned pair = (uint8_t)n->name[0];
	for (size_t i = 0; i + 1 < n->len; i++) {
		pair = (pair << 8 | (uint8_t)n->name[i + 1]) & 0xffff;
		if (bit_get(s->pairs, pair) && pair_match(s, n->name + i, n->len - i))
			return true;
	}
	return false;
}

static bool regexes_match(const domset *s, const domset_name *n)
{
	pcre2_match_data *md = match_data();
	if (!md)
		return false; /* no memory for this thread's match data: no match */
	PCRE2_SPTR subject = (PCRE2_SPTR)n->name;
	for (size_t i = 0; i < s->nrun; i++) {
		int rc = s->jit[i] ? pcre2_jit_match(s->run[i], subject, n->len, 0, 0, md, mctx)
		                   : pcre2_match(s->run[i], subject, n->len, 0, 0, md, mctx);
		if (rc >= 0)
			return true;
	}
	return false;
}

bool domset_match(const domset *s, const domset_name *n)
{
	return (s->used && names_match(s, n)) || (s->nkw && keywords_match(s, n)) ||
	       (s->nrun && regexes_match(s, n));
}

bool domset_empty(const domset *s) { return s->used == 0 && s->nkw == 0 && s->nre == 0; }

size_t domset_count_names(const domset *s) { return s->used; }

size_t domset_count_keywords(const domset *s) { return s->nkw; }

size_t domset_count_regexes(const domset *s) { return s->nre; }
