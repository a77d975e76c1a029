/* toml_tree.h - the document tree as the parser builds it: arena, nodes, table index; private to src/toml. */
#ifndef ETM_TOML_TREE_H
#define ETM_TOML_TREE_H

#include "toml/toml_lex.h"

/* Tables and arrays are nodes: the public value plus what building needs. */
enum {
	F_IMPLICIT = 1 << 0, /* table made on the way to a [header]; one [header] may define it */
	F_DEFINED = 1 << 1,  /* table defined by a [header] or as a [[header]] element */
	F_DOTTED = 1 << 2,   /* table defined by dotted keys; only dotted keys may extend it */
	F_SEALED = 1 << 3,   /* inline table or static array: nothing may extend it */
	F_AOT = 1 << 4,      /* array made by [[header]]; only [[header]] may append */
};

typedef struct toml_node {
	toml_value v; /* first: a toml_node is handed out as its value */
	toml_kv *kvs; /* tables: arena, v.u.tab.items points here */
	toml_value **elems; /* arrays: arena, v.u.arr.items points here */
	uint32_t cap;
	uint32_t *index; /* arena: kv index + 1 per slot, 0 for empty */
	uint32_t index_cap;
	uint32_t depth; /* root 0; every table or array one more than its parent */
	unsigned flags;
} toml_node;

/* Index of key k (n bytes) in table t, or -1. Sub-linear once t is big. */
long toml_tree_find(const toml_node *t, const char *k, size_t n);

/* Appends key k (already checked absent) with value v to table t. */
TOML_WUR int toml_tree_put(toml_parser *p, toml_node *t, const toml_keypart *k, const toml_value *v);

/* Appends v to array a. */
TOML_WUR int toml_tree_push(toml_parser *p, toml_node *a, toml_value *v);

/* A new table or array one level below a container at depth, written at pos;
 * TOML_ERR_DEPTH past TOML_MAX_DEPTH. */
TOML_WUR int toml_tree_new(toml_parser *p, toml_type type, uint32_t depth, toml_pos pos,
                           unsigned flags, toml_node **out);

/* The node of a TOML_TABLE or TOML_ARRAY value; NULL for any other value. */
toml_node *toml_tree_node(const toml_value *v);

void toml_arena_free(toml_arena *a);

#endif
