/* schema.h - the config file's schema as data: every section and key, its type, default and meaning. */
#ifndef ETM_APP_SCHEMA_H
#define ETM_APP_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "etemenanki/spec.h"

/* One table drives both the lowering (config.c walks the TOML document with
 * it, writing each value at its offset in the spec structs) and the reference
 * in docs/config.md (schema_write_reference), so the two cannot drift. */

typedef enum schema_kind {
	SK_STRING,      /* char *, NULL when absent */
	SK_BOOL,        /* bool */
	SK_U64,         /* uint64_t, plus a bool at aux_offset (if not 0) set when present */
	SK_PORT,        /* uint16_t, plus a bool at aux_offset set when present */
	SK_STRLIST,     /* etm_strlist */
	SK_ENUM,        /* int-sized enum; a string among variants */
	SK_PORTS,       /* etm_port_list: an integer, "a-b", or an array of those */
	SK_NETWORKS,    /* unsigned ETM_RULE_NET_* bits: "tcp", "udp" or an array */
	SK_TABLE,       /* a nested struct at offset; a bool at aux_offset (if not 0) set when present */
	SK_TABLE_ARRAY, /* array of structs: pointer at offset, count at aux_offset */
	SK_SETTINGS,    /* etm_settings_spec whose schema depends on the protocol, which
	                 * is an etm_protocol at aux_offset; def is 1 on an inbound */
} schema_kind;

typedef struct schema_variant {
	const char *name;
	int value;
} schema_variant;

typedef struct schema_table schema_table;

typedef struct schema_field {
	const char *name;
	schema_kind kind;
	size_t offset;
	size_t aux_offset;                /* SK_U64, SK_PORT, SK_TABLE presence flag; SK_TABLE_ARRAY count */
	const schema_table *sub;          /* SK_TABLE, SK_TABLE_ARRAY */
	size_t elem_size;                 /* SK_TABLE_ARRAY */
	const schema_variant *variants;   /* SK_ENUM; ends with a NULL name */
	int64_t def;                      /* SK_BOOL, SK_U64, SK_ENUM: value when absent */
	bool required;
	const char *default_doc;          /* how the default reads in the docs; NULL = none */
	const char *doc;                  /* meaning, one sentence or two */
} schema_field;

struct schema_table {
	const char *title; /* how the docs head it: "[[balancer]]" */
	const char *doc;
	const schema_field *fields;
	size_t len;
};

/* The root of the document. */
extern const schema_table schema_root;

/* The settings schema of a protocol on an inbound or an outbound. */
const schema_table *schema_settings(etm_protocol p, bool inbound);

/* The type as the docs write it ("string", "array of strings", "u64", ...). */
const char *schema_type_doc(const schema_field *f);

/* Writes the whole reference as Markdown: one heading and table per section,
 * settings per protocol included. Returns 0, or -1 on a write error. */
__attribute__((warn_unused_result)) int schema_write_reference(FILE *out);

#endif
