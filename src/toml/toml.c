/* toml.c - TOML 1.0 parser: document structure, key and table rules. */
#include "toml/toml.h"
#include "toml/toml_lex.h"
#include "toml/toml_tree.h"

#include <stdlib.h>
#include <string.h>

struct toml_doc {
	toml_arena arena;
	toml_node *root;
};

/* Fails with a message naming parts [0, upto] of the current key joined by
 * dots, at the start of part upto. */
static TOML_WUR int fail_key(toml_parser *p, size_t upto, toml_msg m)
{
	char name[TOML_NAME_SHOWN_MAX + 1]; /* one past what is shown: the message then elides it */
	size_t o = 0, total = 0;
	for (size_t k = 0; k <= upto; k++) {
		const toml_keypart *kp = &p->path[k];
		for (size_t j = 0; j < kp->len + (k > 0); j++) {
			char c = k > 0 && j == 0 ? '.' : kp->s[j - (k > 0)];
			if (o < sizeof(name))
				name[o++] = c;
			total++;
		}
	}
	return toml_fail(p, p->path[upto].start, TOML_ERR_SYNTAX, m, name, total);
}


static TOML_WUR int nomem(toml_parser *p)
{
	return toml_fail(p, 0, TOML_ERR_NOMEM, TM_NOMEM, NULL, 0);
}

static void skip_ws(toml_parser *p)
{
	while (p->i < p->len && (p->s[p->i] == ' ' || p->s[p->i] == '\t'))
		p->i++;
}

/* A comment from its '#' to the end of the line (not included). */
static TOML_WUR int comment(toml_parser *p)
{
	for (p->i++; p->i < p->len; p->i++) {
		unsigned char c = p->s[p->i];
		if (c == '\n' || (c == '\r' && p->i + 1 < p->len && p->s[p->i + 1] == '\n'))
			return 0;
		if (c == '\r')
			return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_BARE_CR, NULL, 0);
		if ((c < 0x20 && c != '\t') || c == 0x7F)
			return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_CTRL_COMMENT, NULL, 0);
	}
	return 0;
}

/* Whitespace, then an optional comment, then a newline or the end; m if not. */
static TOML_WUR int end_line(toml_parser *p, toml_msg m)
{
	int rc;
	skip_ws(p);
	if (p->i < p->len && p->s[p->i] == '#' && (rc = comment(p)) < 0)
		return rc;
	if (p->i >= p->len)
		return 0;
	if (p->s[p->i] == '\n') {
		p->i++;
		return 0;
	}
	if (p->s[p->i] == '\r') {
		if (p->i + 1 < p->len && p->s[p->i + 1] == '\n') {
			p->i += 2;
			return 0;
		}
		return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_BARE_CR, NULL, 0);
	}
	return toml_fail(p, p->i, TOML_ERR_SYNTAX, m, NULL, 0);
}

/* Whitespace, newlines and comments, as arrays allow between values. */
static TOML_WUR int skip_blank(toml_parser *p)
{
	int rc;
	for (;;) {
		skip_ws(p);
		if (p->i >= p->len)
			return 0;
		unsigned char c = p->s[p->i];
		if (c != '#' && c != '\n' && c != '\r')
			return 0;
		if ((rc = end_line(p, TM_ARRAY_SEP)) < 0)
			return rc;
	}
}

/* A dotted key into p->path, stopping after the whitespace behind it. */
static TOML_WUR int key_path(toml_parser *p)
{
	int rc;
	p->npath = 0;
	for (;;) {
		if (p->npath == sizeof(p->path) / sizeof(p->path[0]))
			return toml_fail(p, p->i, TOML_ERR_DEPTH, TM_DEPTH, NULL, 0);
		toml_keypart *kp = &p->path[p->npath];
		kp->start = p->i;
		kp->pos = toml_pos_at(p, p->i);
		unsigned char c = p->i < p->len ? p->s[p->i] : 0;
		if (c == '"' || c == '\'') {
			if ((rc = toml_lex_string(p, true, &kp->s, &kp->len)) < 0)
				return rc;
		} else if (toml_lex_is_bare(c)) {
			size_t e = p->i;
			while (e < p->len && toml_lex_is_bare(p->s[e]))
				e++;
			kp->len = e - p->i;
			if (!(kp->s = toml_arena_strdup(p->arena, (const char *)p->s + p->i, kp->len)))
				return nomem(p);
			p->i = e;
		} else {
			return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_EXPECT_KEY, NULL, 0);
		}
		kp->end = p->i;
		kp->pos.end = (uint32_t)p->i;
		p->npath++;
		skip_ws(p);
		if (p->i >= p->len || p->s[p->i] != '.')
			return 0;
		p->i++;
		skip_ws(p);
	}
}

static TOML_WUR int value(toml_parser *p, uint32_t depth, toml_value **out);

/* `key = value` into table t; on return p->i is just past the value. */
static TOML_WUR int keyval(toml_parser *p, toml_node *t)
{
	int rc;
	if ((rc = key_path(p)) < 0)
		return rc;
	/* Every part but the last names a table: made here, or made by an
	 * earlier dotted key (toml.io/en/v1.0.0#keys, #table). */
	for (size_t k = 0; k + 1 < p->npath; k++) {
		const toml_keypart *kp = &p->path[k];
		long i = toml_tree_find(t, kp->s, kp->len);
		if (i < 0) {
			toml_node *n;
			if ((rc = toml_tree_new(p, TOML_TABLE, t->depth, kp->pos, F_DOTTED, &n)) < 0 ||
			    (rc = toml_tree_put(p, t, kp, &n->v)) < 0)
				return rc;
			t = n;
			continue;
		}
		const toml_value *v = t->kvs[i].value;
		if (v->type != TOML_TABLE)
			return fail_key(p, k, TM_NOT_TABLE);
		toml_node *n = toml_tree_node(v);
		if (n->flags & F_SEALED)
			return fail_key(p, k, TM_INLINE_SEALED);
		if (!(n->flags & F_DOTTED)) {
			/* A table only named on the way to a [header] is not defined
			 * yet: dotted keys may define it, and then no [header] may. */
			if (!(n->flags & F_IMPLICIT) || (n->flags & F_DEFINED))
				return fail_key(p, k, TM_DOTTED_EXTEND);
			n->flags |= F_DOTTED;
		}
		t = n;
	}
	size_t last = p->npath - 1;
	toml_keypart kp = p->path[last];
	if (toml_tree_find(t, kp.s, kp.len) >= 0)
		return fail_key(p, last, TM_DUP_KEY);
	if (p->i >= p->len || p->s[p->i] != '=')
		return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_EXPECT_EQ, NULL, 0);
	p->i++;
	skip_ws(p);
	/* The value may nest keys of its own: kp is the copy that survives. */
	toml_value *v;
	if ((rc = value(p, t->depth, &v)) < 0)
		return rc;
	return toml_tree_put(p, t, &kp, v);
}

static TOML_WUR int array(toml_parser *p, uint32_t depth, toml_value **out)
{
	int rc;
	toml_node *a;
	if ((rc = toml_tree_new(p, TOML_ARRAY, depth, toml_pos_at(p, p->i), F_SEALED, &a)) < 0)
		return rc;
	p->i++;
	for (;;) {
		if ((rc = skip_blank(p)) < 0)
			return rc;
		if (p->i < p->len && p->s[p->i] == ']')
			break;
		toml_value *v;
		if ((rc = value(p, a->depth, &v)) < 0 || (rc = toml_tree_push(p, a, v)) < 0)
			return rc;
		if ((rc = skip_blank(p)) < 0)
			return rc;
		if (p->i < p->len && p->s[p->i] == ',') {
			p->i++;
			continue;
		}
		if (p->i < p->len && p->s[p->i] == ']')
			break;
		return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_ARRAY_SEP, NULL, 0);
	}
	p->i++;
	a->v.pos.end = (uint32_t)p->i;
	*out = &a->v;
	return 0;
}

/* { k = v, ... } on one line, no trailing comma; sealed once closed. */
static TOML_WUR int inline_table(toml_parser *p, uint32_t depth, toml_value **out)
{
	int rc;
	toml_node *t;
	if ((rc = toml_tree_new(p, TOML_TABLE, depth, toml_pos_at(p, p->i), 0, &t)) < 0)
		return rc;
	p->i++;
	skip_ws(p);
	bool first = true;
	for (;;) {
		unsigned char c = p->i < p->len ? p->s[p->i] : 0;
		if (c == '}') {
			if (!first)
				return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_INLINE_TRAILING, NULL, 0);
			break;
		}
		if (c == '\n' || c == '\r')
			return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_INLINE_NL, NULL, 0);
		if ((rc = keyval(p, t)) < 0)
			return rc;
		first = false;
		skip_ws(p);
		c = p->i < p->len ? p->s[p->i] : 0;
		if (c == ',') {
			p->i++;
			skip_ws(p);
			continue;
		}
		if (c == '}')
			break;
		if (c == '\n' || c == '\r')
			return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_INLINE_NL, NULL, 0);
		return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_INLINE_SEP, NULL, 0);
	}
	p->i++;
	t->flags |= F_SEALED;
	t->v.pos.end = (uint32_t)p->i;
	*out = &t->v;
	return 0;
}

/* Any value at p->i, held by a container at depth. Recursion happens only
 * through array and inline_table, each one level deeper, so it stops at
 * TOML_MAX_DEPTH. */
static TOML_WUR int value(toml_parser *p, uint32_t depth, toml_value **out)
{
	if (p->i >= p->len)
		return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_EXPECT_VALUE, NULL, 0);
	unsigned char c = p->s[p->i];
	if (c == '[')
		return array(p, depth, out);
	if (c == '{')
		return inline_table(p, depth, out);
	toml_value *v = toml_arena_alloc(p->arena, sizeof(*v));
	if (!v)
		return nomem(p);
	memset(v, 0, sizeof(*v));
	size_t start = p->i;
	int rc;
	if (c == '"' || c == '\'') {
		v->type = TOML_STRING;
		rc = toml_lex_string(p, false, &v->u.str.ptr, &v->u.str.len);
	} else {
		rc = toml_lex_scalar(p, v);
	}
	if (rc < 0)
		return rc;
	v->pos = toml_pos_at(p, start);
	v->pos.end = (uint32_t)p->i;
	*out = v;
	return 0;
}

/* [a.b] or [[a.b]] at p->i: resolves it against root (toml.io/en/v1.0.0#table
 * and #array-of-tables) and makes the table it names current. */
static TOML_WUR int header(toml_parser *p, toml_node *root, toml_node **cur)
{
	int rc;
	size_t start = p->i;
	bool aot = p->i + 1 < p->len && p->s[p->i + 1] == '[';
	toml_pos hpos = toml_pos_at(p, start);
	p->i += aot ? 2 : 1;
	skip_ws(p);
	if ((rc = key_path(p)) < 0)
		return rc;
	if (aot) {
		if (p->len - p->i < 2 || p->s[p->i] != ']' || p->s[p->i + 1] != ']')
			return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_AOT_CLOSE, NULL, 0);
		p->i += 2;
	} else {
		if (p->i >= p->len || p->s[p->i] != ']')
			return toml_fail(p, p->i, TOML_ERR_SYNTAX, TM_HEADER_CLOSE, NULL, 0);
		p->i++;
	}
	hpos.end = (uint32_t)p->i;
	toml_node *t = root;
	size_t last = p->npath - 1;
	for (size_t k = 0; k < last; k++) {
		const toml_keypart *kp = &p->path[k];
		long i = toml_tree_find(t, kp->s, kp->len);
		if (i < 0) {
			toml_node *n;
			if ((rc = toml_tree_new(p, TOML_TABLE, t->depth, hpos, F_IMPLICIT, &n)) < 0 ||
			    (rc = toml_tree_put(p, t, kp, &n->v)) < 0)
				return rc;
			t = n;
			continue;
		}
		toml_node *n = toml_tree_node(t->kvs[i].value);
		if (!n)
			return fail_key(p, k, TM_NOT_TABLE);
		if (n->v.type == TOML_ARRAY && (n->flags & F_AOT)) {
			/* [a.b] under [[a]] goes into a's last element. */
			t = toml_tree_node(n->elems[n->v.u.arr.len - 1]);
		} else if (n->v.type == TOML_TABLE && !(n->flags & F_SEALED)) {
			t = n;
		} else {
			return fail_key(p, k, n->v.type == TOML_TABLE ? TM_INLINE_SEALED : TM_NOT_TABLE);
		}
	}
	const toml_keypart *kp = &p->path[last];
	long i = toml_tree_find(t, kp->s, kp->len);
	if (i >= 0 && !toml_tree_node(t->kvs[i].value))
		return fail_key(p, last, TM_DUP_KEY); /* a scalar */
	toml_node *n = i < 0 ? NULL : toml_tree_node(t->kvs[i].value);
	if (!aot) {
		if (!n) {
			if ((rc = toml_tree_new(p, TOML_TABLE, t->depth, hpos, F_DEFINED, &n)) < 0 ||
			    (rc = toml_tree_put(p, t, kp, &n->v)) < 0)
				return rc;
		} else if (n->v.type != TOML_TABLE) {
			return fail_key(p, last, TM_NOT_TABLE);
		} else if (n->flags & F_SEALED) {
			return fail_key(p, last, TM_INLINE_SEALED);
		} else if (n->flags & F_DOTTED) {
			return fail_key(p, last, TM_DOTTED_TABLE);
		} else if (n->flags & F_DEFINED) {
			return fail_key(p, last, TM_TABLE_TWICE);
		} else {
			n->flags |= F_DEFINED;
			n->v.pos = hpos;
		}
		*cur = n;
		return 0;
	}
	if (!n) {
		if ((rc = toml_tree_new(p, TOML_ARRAY, t->depth, hpos, F_AOT, &n)) < 0 ||
		    (rc = toml_tree_put(p, t, kp, &n->v)) < 0)
			return rc;
	} else if (n->v.type != TOML_ARRAY) {
		return fail_key(p, last, TM_NOT_AOT);
	} else if (!(n->flags & F_AOT)) {
		return fail_key(p, last, TM_STATIC_ARRAY);
	}
	toml_node *e;
	if ((rc = toml_tree_new(p, TOML_TABLE, n->depth, hpos, F_DEFINED, &e)) < 0 ||
	    (rc = toml_tree_push(p, n, &e->v)) < 0)
		return rc;
	*cur = e;
	return 0;
}

static TOML_WUR int document(toml_parser *p, toml_node *root)
{
	int rc;
	toml_node *cur = root;
	for (;;) {
		skip_ws(p);
		if (p->i >= p->len)
			return 0;
		unsigned char c = p->s[p->i];
		if (c == '#' || c == '\n' || c == '\r') {
			rc = end_line(p, TM_EXPECT_KEY);
		} else if (c == '[') {
			if ((rc = header(p, root, &cur)) == 0)
				rc = end_line(p, TM_NL_AFTER_HEADER);
		} else {
			if ((rc = keyval(p, cur)) == 0)
				rc = end_line(p, TM_NL_AFTER_VALUE);
		}
		if (rc < 0)
			return rc;
	}
}

int toml_parse(const char *text, size_t len, toml_doc **out, toml_error *err)
{
	toml_error spare;
	if (!err)
		err = &spare;
	memset(err, 0, sizeof(*err));
	*out = NULL;
	if (len > TOML_MAX_INPUT) {
		toml_error_set(err, TM_TOO_BIG, NULL, 0);
		return TOML_ERR_TOO_BIG;
	}
	/* The parser state holds the key path: too big for some thread stacks. */
	toml_parser *p = calloc(1, sizeof(*p));
	toml_doc *doc = calloc(1, sizeof(*doc));
	int rc;
	if (!p || !doc) {
		rc = TOML_ERR_NOMEM;
		toml_error_set(err, TM_NOMEM, NULL, 0);
		goto done;
	}
	p->s = (const unsigned char *)(text ? text : "");
	p->len = text ? len : 0;
	p->arena = &doc->arena;
	p->err = err;
	/* A UTF-8 byte order mark is not part of the document. */
	if (p->len >= 3 && !memcmp(p->s, "\xEF\xBB\xBF", 3))
		p->base = p->i = 3;
	p->pc_off = p->base;
	p->pc_line = p->pc_col = 1;
	if ((rc = toml_lex_utf8_check(p)) < 0)
		goto done;
	toml_node *root;
	toml_pos rpos = {1, 1, 0, (uint32_t)p->len};
	if ((rc = toml_tree_new(p, TOML_TABLE, 0, rpos, F_DEFINED, &root)) < 0)
		goto done;
	root->depth = 0;
	doc->root = root;
	if ((rc = document(p, root)) < 0)
		goto done;
	*out = doc;
	doc = NULL;
done:
	if (doc) {
		toml_arena_free(&doc->arena);
		free(doc);
	}
	if (p)
		free(p->buf);
	free(p);
	return rc;
}

void toml_doc_free(toml_doc *doc)
{
	if (!doc)
		return;
	toml_arena_free(&doc->arena);
	free(doc);
}

const toml_value *toml_doc_root(const toml_doc *doc)
{
	return &doc->root->v;
}

/* Linear: the hash index is kept for parsing only, and callers look up the
 * handful of keys a config section has. */
const toml_kv *toml_table_find(const toml_value *t, const char *key)
{
	if (!t || t->type != TOML_TABLE || !key)
		return NULL;
	size_t n = strlen(key);
	for (size_t i = 0; i < t->u.tab.len; i++) {
		const toml_kv *kv = &t->u.tab.items[i];
		if (kv->key_len == n && !memcmp(kv->key, key, n))
			return kv;
	}
	return NULL;
}

const char *toml_type_name(toml_type t)
{
	switch (t) {
	case TOML_TABLE: return "table";
	case TOML_ARRAY: return "array";
	case TOML_STRING: return "string";
	case TOML_INTEGER: return "integer";
	case TOML_FLOAT: return "float";
	case TOML_BOOL: return "bool";
	case TOML_DATETIME: return "datetime";
	case TOML_DATETIME_LOCAL: return "datetime-local";
	case TOML_DATE_LOCAL: return "date-local";
	case TOML_TIME_LOCAL: return "time-local";
	}
	return "unknown";
}
