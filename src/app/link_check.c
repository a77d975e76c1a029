/* link_check.c - an imported outbound's printed block put through the checks --test runs, so that import and --test never disagree (issue 32 D4). */
#include "app/link.h"

#include <stdlib.h>
#include <string.h>

#include "app/config.h"
#include "etemenanki/supervisor.h"

_Static_assert(LINK_TEXT_MAX >= CONFIG_MSG_MAX, "a check's message fits a link_error");

/* What the block is checked after: the config needs an inbound, and a
 * start builds one; socks takes no settings (the same head the unit tests
 * and the fuzz target put before a printed block). */
static const char head[] = "[[inbound]]\ntag = \"in\"\nprotocol = \"socks\"\nport = 1080\n\n";

/* The tag cut to LINK_DETAIL_MAX - 1 bytes, not inside a UTF-8 sequence
 * (the loader takes UTF-8 only). */
static void cut_tag(const char *tag, char out[LINK_DETAIL_MAX])
{
	size_t n = strlen(tag);
	if (n > LINK_DETAIL_MAX - 1) {
		n = LINK_DETAIL_MAX - 1;
		while (n && ((unsigned char)tag[n] & 0xc0) == 0x80)
			n--;
	}
	memcpy(out, tag, n);
	out[n] = '\0';
}

/* The message into e, one printable line (a tag may hold any UTF-8). */
static int refuse(link_error *e, const char *msg)
{
	e->code = LINK_E_CHECK;
	size_t n = 0;
	for (; msg[n] && n + 1 < sizeof e->detail; n++) {
		unsigned char c = (unsigned char)msg[n];
		e->detail[n] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	e->detail[n] = '\0';
	return LINK_E_CHECK;
}

int link_check(const etm_outbound_spec *o, link_error *e)
{
	etm_outbound_spec c = *o; /* borrowed strings; only the tag differs */
	char tag[LINK_DETAIL_MAX];
	cut_tag(o->tag ? o->tag : "", tag);
	c.tag = tag;
	size_t size = sizeof head - 1 + LINK_TOML_MAX;
	char *text = malloc(size);
	if (!text) {
		e->code = LINK_E_NOMEM;
		e->detail[0] = '\0';
		return LINK_E_NOMEM;
	}
	memcpy(text, head, sizeof head - 1);
	int n = link_toml_write(&c, text + sizeof head - 1, size - (sizeof head - 1));
	int rc = 0;
	char msg[CONFIG_MSG_MAX];
	etm_spec spec;
	if (n < 0) { /* LINK_TOML_MAX holds any link's block */
		rc = LINK_E_NOMEM;
		e->code = LINK_E_NOMEM;
		e->detail[0] = '\0';
	} else if (config_load(text, sizeof head - 1 + (size_t)n, &spec, msg, sizeof msg)) {
		rc = refuse(e, msg);
	} else {
		if (o->protocol != ETM_PROTO_HYSTERIA2 &&
		    etm_supervisor_check(&spec, msg, sizeof msg))
			rc = refuse(e, msg);
		etm_spec_free(&spec);
	}
	free(text);
	return rc;
}
