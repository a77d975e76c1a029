/* fuzz_toml.c - libFuzzer target: toml_parse on arbitrary bytes, then a walk of the tree. */
#include <stddef.h>
#include <stdint.h>

#include "toml/toml.h"

/* Touches every node so the sanitizers see any bad pointer the parser left;
 * depth is bounded by TOML_MAX_DEPTH. */
static size_t walk(const toml_value *v)
{
	size_t n = 1 + v->pos.end - v->pos.start;
	if (v->type == TOML_TABLE) {
		for (size_t i = 0; i < v->u.tab.len; i++)
			n += v->u.tab.items[i].key_len + (unsigned char)v->u.tab.items[i].key[0] +
			     walk(v->u.tab.items[i].value);
	} else if (v->type == TOML_ARRAY) {
		for (size_t i = 0; i < v->u.arr.len; i++)
			n += walk(v->u.arr.items[i]);
	} else if (v->type == TOML_STRING) {
		n += v->u.str.len + (unsigned char)v->u.str.ptr[v->u.str.len];
	}
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	toml_doc *doc;
	toml_error err;
	if (toml_parse((const char *)data, size, &doc, &err) == TOML_OK) {
		volatile size_t sink = walk(toml_doc_root(doc));
		(void)sink;
		toml_doc_free(doc);
	}
	return 0;
}
