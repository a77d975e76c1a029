/* toml_tree.c - the document tree under construction: arena, tables with a hash index, arrays. */
#include "toml/toml_tree.h"

#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

/* Tables with fewer keys are searched linearly; bigger ones get a hash index
 * so a document of many keys parses in linear time. */
#define INDEX_MIN 8

struct toml_arena_chunk {
	toml_arena_chunk *next;
	size_t size;
	max_align_t data[];
};

/* Arena chunk size: big enough that a config needs a handful. */
#define CHUNK_SIZE (64u * 1024u)

void *toml_arena_alloc(toml_arena *a, size_t n)
{
	const size_t al = alignof(max_align_t);
	n = (n + al - 1) & ~(al - 1);
	if (!a->head || a->head->size - a->used < n) {
		size_t size = n > CHUNK_SIZE / 4 ? n : CHUNK_SIZE;
		toml_arena_chunk *c = malloc(sizeof(*c) + size);
		if (!c)
			return NULL;
		c->size = size;
		if (a->head && size != CHUNK_SIZE) {
			/* A big block gets its own chunk behind the current one. */
			c->next = a->head->next;
			a->head->next = c;
			return c->data;
		}
		c->next = a->head;
		a->head = c;
		a->used = 0;
	}
	void *r = (char *)a->head->data + a->used;
	a->used += n;
	return r;
}

char *toml_arena_strdup(toml_arena *a, const char *s, size_t n)
{
	char *d = toml_arena_alloc(a, n + 1);
	if (d) {
		if (n)
			memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

void toml_arena_free(toml_arena *a)
{
	toml_arena_chunk *c = a->head;
	while (c) {
		toml_arena_chunk *next = c->next;
		free(c);
		c = next;
	}
	a->head = NULL;
}

/* FNV-1a, its high bits folded into the low ones the index uses. */
static uint64_t hash(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325u;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3u;
	}
	return h ^ (h >> 29);
}

long toml_tree_find(const toml_node *t, const char *k, size_t n)
{
	if (!t->index) {
		for (size_t i = 0; i < t->v.u.tab.len; i++)
			if (t->kvs[i].key_len == n && !memcmp(t->kvs[i].key, k, n))
				return (long)i;
		return -1;
	}
	uint32_t mask = t->index_cap - 1;
	for (uint32_t s = (uint32_t)hash(k, n) & mask;; s = (s + 1) & mask) {
		uint32_t slot = t->index[s];
		if (!slot)
			return -1;
		const toml_kv *kv = &t->kvs[slot - 1];
		if (kv->key_len == n && !memcmp(kv->key, k, n))
			return (long)slot - 1;
	}
}

static void index_add(toml_node *t, uint32_t i)
{
	uint32_t mask = t->index_cap - 1;
	uint32_t s = (uint32_t)hash(t->kvs[i].key, t->kvs[i].key_len) & mask;
	while (t->index[s])
		s = (s + 1) & mask;
	t->index[s] = i + 1;
}

static TOML_WUR int nomem(toml_parser *p)
{
	return toml_fail(p, 0, TOML_ERR_NOMEM, TM_NOMEM, NULL, 0);
}

int toml_tree_put(toml_parser *p, toml_node *t, const toml_keypart *k, const toml_value *v)
{
	size_t len = t->v.u.tab.len;
	if (len == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 4;
		toml_kv *kvs = toml_arena_alloc(p->arena, cap * sizeof(*kvs));
		if (!kvs)
			return nomem(p);
		if (len)
			memcpy(kvs, t->kvs, len * sizeof(*kvs));
		t->kvs = kvs;
		t->cap = cap;
		t->v.u.tab.items = kvs;
	}
	toml_kv *kv = &t->kvs[len];
	kv->key = k->s;
	kv->key_len = k->len;
	kv->key_pos = k->pos;
	kv->value = v;
	t->v.u.tab.len = ++len;
	if (len >= INDEX_MIN && len * 2 > t->index_cap) {
		uint32_t cap = t->index_cap ? t->index_cap : 16;
		while (cap < len * 2)
			cap *= 2;
		uint32_t *idx = toml_arena_alloc(p->arena, cap * sizeof(*idx));
		if (!idx)
			return nomem(p);
		memset(idx, 0, cap * sizeof(*idx));
		t->index = idx;
		t->index_cap = cap;
		for (uint32_t i = 0; i < len; i++)
			index_add(t, i);
	} else if (t->index) {
		index_add(t, (uint32_t)len - 1);
	}
	return 0;
}

int toml_tree_push(toml_parser *p, toml_node *a, toml_value *v)
{
	size_t len = a->v.u.arr.len;
	if (len == a->cap) {
		uint32_t cap = a->cap ? a->cap * 2 : 4;
		toml_value **e = toml_arena_alloc(p->arena, cap * sizeof(*e));
		if (!e)
			return nomem(p);
		if (len)
			memcpy(e, a->elems, len * sizeof(*e));
		a->elems = e;
		a->cap = cap;
		a->v.u.arr.items = (const toml_value *const *)e;
	}
	a->elems[len] = v;
	a->v.u.arr.len = len + 1;
	return 0;
}

/* pos is taken by the caller before it reads on: the line/column cache
 * only runs forward cheaply. */
int toml_tree_new(toml_parser *p, toml_type type, uint32_t depth, toml_pos pos, unsigned flags,
                  toml_node **out)
{
	if (depth >= TOML_MAX_DEPTH)
		return toml_fail(p, pos.start, TOML_ERR_DEPTH, TM_DEPTH, NULL, 0);
	toml_node *n = toml_arena_alloc(p->arena, sizeof(*n));
	if (!n)
		return nomem(p);
	memset(n, 0, sizeof(*n));
	n->v.type = type;
	n->v.pos = pos;
	n->depth = depth + 1;
	n->flags = flags;
	*out = n;
	return 0;
}

/* Every table and array value is the first member of a node. */
toml_node *toml_tree_node(const toml_value *v)
{
	if (v->type != TOML_TABLE && v->type != TOML_ARRAY)
		return NULL;
	return (toml_node *)(uintptr_t)v;
}