/* list.h - an intrusive doubly linked list: a node inside each member, a head and a tail, no allocation. */
#ifndef ETM_BASE_LIST_H
#define ETM_BASE_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct list_node {
	struct list_node *prev, *next; /* NULL at either end */
} list_node;

/* A zeroed list is empty. Not thread-safe: its owner says which thread. */
typedef struct list {
	list_node *head, *tail;
} list;

/* The member whose node n is (n inside type's field member). */
#define LIST_ENTRY(n, type, member) ((type *)(void *)((char *)(n) - offsetof(type, member)))

static inline bool list_empty(const list *l) { return l->head == NULL; }

static inline void list_push_back(list *l, list_node *n)
{
	n->next = NULL;
	n->prev = l->tail;
	if (l->tail)
		l->tail->next = n;
	else
		l->head = n;
	l->tail = n;
}

static inline void list_push_front(list *l, list_node *n)
{
	n->prev = NULL;
	n->next = l->head;
	if (l->head)
		l->head->prev = n;
	else
		l->tail = n;
	l->head = n;
}

/* n must be on l. */
static inline void list_remove(list *l, list_node *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
	n->prev = n->next = NULL;
}

#endif
