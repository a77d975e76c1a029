/* domset.h - domain-name matcher sets (full names, suffixes, keywords, PCRE2 regexes) and the prepared names they test. */
#ifndef ETM_ROUTE_DOMSET_H
#define ETM_ROUTE_DOMSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/addr.h"

/* A candidate name is at most ADDR_DOMAIN_MAX bytes (RFC 1035 via SOCKS5's
 * one-byte length); a longer one cannot be dialled and is no candidate. */
#define DOMSET_NAME_MAX ADDR_DOMAIN_MAX

/* Suffixes on label boundaries a name of DOMSET_NAME_MAX bytes can have:
 * one per label, and a label takes at least one byte plus its dot. */
#define DOMSET_SUFFIX_MAX ((DOMSET_NAME_MAX + 1) / 2)

/* PCRE2 match limit per regex and candidate (pcre2_set_match_limit). A
 * domain pattern needs at most a few thousand steps on a 255-byte name;
 * this bounds what a pathological pattern costs one decision to about a
 * millisecond instead of PCRE2's default ten million steps. */
#define DOMSET_REGEX_MATCH_LIMIT 100000

/* A name prepared once per decision and tested against many sets: ASCII
 * lowercased, one trailing dot dropped, and the hash of every suffix that
 * starts on a label boundary (the whole name included) computed in one
 * pass, so a set lookup costs one probe per label. It points into itself:
 * prepare it where it is used, do not copy it. */
typedef struct domset_name {
	const char *name; /* into pad, NUL-terminated */
	uint16_t len;
	uint8_t nsuf;
	uint8_t off[DOMSET_SUFFIX_MAX];   /* where each suffix starts; off[k] == 0 is the whole name */
	uint64_t hash[DOMSET_SUFFIX_MAX]; /* of name + off[k] */
	/* The name, after 8 bytes the hash may read before its start and
	 * followed by 8 zero bytes (its terminator among them), so it can be
	 * read and lowercased a word at a time. */
	char pad[8 + DOMSET_NAME_MAX + 8];
} domset_name;

/* Prepares name (len bytes). Returns false, leaving n unusable, when the
 * name is empty (or only a dot) or longer than DOMSET_NAME_MAX. */
bool domset_name_prepare(domset_name *n, const char *name, size_t len);

/* Build with domset_add_*, then domset_seal once; a sealed set is immutable
 * and domset_match may run on any thread at once (the regex match data is
 * per thread, created on a thread's first regex match and freed when the
 * thread exits). Every add lowercases ASCII letters and copies its text. */
typedef struct domset domset;

/* NULL when memory runs out. */
__attribute__((warn_unused_result)) domset *domset_new(void);
void domset_del(domset *s);

/* Exactly this name. One trailing dot is dropped. Returns 0, or -1 when
 * memory runs out. A name that could never be a candidate (empty, longer
 * than DOMSET_NAME_MAX) is accepted and never matches. */
__attribute__((warn_unused_result)) int domset_add_full(domset *s, const char *name, size_t len);

/* This name and every name under it, on label boundaries: "example.com"
 * matches "example.com" and "a.example.com", not "badexample.com". With a
 * leading dot (".example.com") only names under it match, not the name
 * itself. One trailing dot is dropped. Returns 0 or -1 (memory). */
__attribute__((warn_unused_result)) int domset_add_suffix(domset *s, const char *name,
                                                          size_t len);

/* Names containing this text anywhere (ASCII case-insensitive); an empty
 * keyword matches every name. Returns 0 or -1 (memory). */
__attribute__((warn_unused_result)) int domset_add_keyword(domset *s, const char *kw, size_t len);

/* Compiles pattern with PCRE2 (8-bit, no UTF, default options) and adds it;
 * it is matched against the lowercased name, unanchored unless it anchors
 * itself. Returns 0, -1 when memory runs out, or -2 when the pattern does
 * not compile, with "<PCRE2 reason> at offset N" in reason. Sealing
 * JIT-compiles the patterns (falling back to the interpreter where the
 * machine refuses JIT) and joins anchored ones into one alternation. */
__attribute__((warn_unused_result)) int domset_add_regex(domset *s, const char *pattern,
                                                         char *reason, size_t reason_size);

/* Whether pattern compiles; -1 with the reason as domset_add_regex. */
__attribute__((warn_unused_result)) int domset_regex_check(const char *pattern, char *reason,
                                                           size_t reason_size);

/* Builds the keyword index and the name filter, and compiles the regexes
 * for matching. Call once, after the last add. Returns 0 or -1 (memory). */
__attribute__((warn_unused_result)) int domset_seal(domset *s);

/* Whether the prepared name matches any entry of the sealed set. Cost: one
 * filter bit (and for a hit, one hash probe) per label, one pass over the
 * name for keywords, then one JIT call per regex (anchored ones joined). */
bool domset_match(const domset *s, const domset_name *n);

/* Whether nothing was added (such a set never matches). */
bool domset_empty(const domset *s);

/* Entries per kind, for tests and the benchmark: full and suffix names
 * (after folding duplicates), keywords, regexes. */
size_t domset_count_names(const domset *s);
size_t domset_count_keywords(const domset *s);
size_t domset_count_regexes(const domset *s);

#endif
