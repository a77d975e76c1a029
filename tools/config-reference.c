/* config-reference - writes, checks or refreshes the key reference in docs/config.md from the schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/schema.h"

static const char BEGIN[] = "<!-- BEGIN GENERATED REFERENCE (make docs) -->\n";
static const char END[] = "<!-- END GENERATED REFERENCE -->\n";

/* A docs page is small; a bigger file is not ours. */
#define DOC_MAX (1024 * 1024)

static const char *const msgs[] = {
	"usage: config-reference [DOC --check | DOC --write]\n",
	"config-reference: cannot read %s\n",
	"config-reference: %s has no generated-reference markers\n",
	"config-reference: %s is out of date with the schema in src/app/schema.c; run `make docs`\n",
	"config-reference: cannot write %s\n",
};

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = malloc(DOC_MAX + 1);
	size_t n = buf ? fread(buf, 1, DOC_MAX, f) : 0;
	fclose(f);
	if (!buf || n == DOC_MAX) {
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

int main(int argc, char **argv)
{
	char *gen = NULL;
	size_t gen_len = 0;
	FILE *mem = open_memstream(&gen, &gen_len);
	if (!mem || schema_write_reference(mem) || fclose(mem))
		return 1;
	if (argc == 1) {
		fputs(gen, stdout);
		free(gen);
		return 0;
	}
	if (argc != 3 || (strcmp(argv[2], "--check") && strcmp(argv[2], "--write"))) {
		fputs(msgs[0], stderr);
		return 2;
	}
	const char *path = argv[1];
	size_t len;
	char *doc = slurp(path, &len);
	if (!doc) {
		fprintf(stderr, msgs[1], path);
		return 1;
	}
	char *b = strstr(doc, BEGIN);
	char *e = b ? strstr(b, END) : NULL;
	if (!e) {
		fprintf(stderr, msgs[2], path);
		return 1;
	}
	char *body = b + strlen(BEGIN);
	int rc = 0;
	bool same = (size_t)(e - body) == gen_len && memcmp(body, gen, gen_len) == 0;
	if (strcmp(argv[2], "--check") == 0) {
		if (!same) {
			fprintf(stderr, msgs[3], path);
			rc = 1;
		}
	} else if (!same) {
		FILE *f = fopen(path, "wb");
		if (!f || fwrite(doc, 1, (size_t)(body - doc), f) != (size_t)(body - doc) ||
		    fwrite(gen, 1, gen_len, f) != gen_len || fputs(e, f) == EOF || fclose(f)) {
			fprintf(stderr, msgs[4], path);
			rc = 1;
		}
	}
	free(doc);
	free(gen);
	return rc;
}
