/* ttl_table.c - a bounded cache's hash chains, LRU list and victim. */
#include "base/ttl_table.h"

#include <stdlib.h>

int ttl_table_init(ttl_table *t, size_t capacity)
{
	size_t buckets = 1;
	while (buckets < capacity)
		buckets <<= 1;
	*t = (ttl_table){.capacity = capacity, .mask = buckets - 1};
	t->buckets = calloc(buckets, sizeof *t->buckets);
	return t->buckets ? 0 : -1;
}

void ttl_table_free(ttl_table *t, void (*free_node)(ttl_node *n))
{
	list_node *i = t->lru.head;
	while (i) {
		list_node *older = i->next;
		free_node(LIST_ENTRY(i, ttl_node, lru));
		i = older;
	}
	free(t->buckets);
	*t = (ttl_table){0};
}

void ttl_table_insert(ttl_table *t, ttl_node *n)
{
	ttl_node **bucket = &t->buckets[n->hash & t->mask];
	n->chain = *bucket;
	*bucket = n;
	list_push_front(&t->lru, &n->lru);
	t->count++;
}

void ttl_table_detach(ttl_table *t, ttl_node *n)
{
	ttl_node **link = &t->buckets[n->hash & t->mask];
	while (*link != n)
		link = &(*link)->chain;
	*link = n->chain;
	list_remove(&t->lru, &n->lru);
	t->count--;
}

void ttl_table_touch(ttl_table *t, ttl_node *n)
{
	list_remove(&t->lru, &n->lru);
	list_push_front(&t->lru, &n->lru);
}

ttl_node *ttl_table_make_room(ttl_table *t, uint64_t now_ms)
{
	if (t->count < t->capacity)
		return NULL;
	ttl_node *v = ttl_table_victim(t, now_ms);
	if (v)
		ttl_table_detach(t, v);
	return v;
}

ttl_node *ttl_table_victim(const ttl_table *t, uint64_t now_ms)
{
	list_node *i = t->lru.tail;
	for (int k = 0; i && k < TTL_TABLE_EVICT_SCAN; k++, i = i->prev)
		if (now_ms >= LIST_ENTRY(i, ttl_node, lru)->expires_ms)
			return LIST_ENTRY(i, ttl_node, lru);
	return t->lru.tail ? LIST_ENTRY(t->lru.tail, ttl_node, lru) : NULL;
}
