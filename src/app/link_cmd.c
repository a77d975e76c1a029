/* link_cmd.c - `etemenanki-app link import LINK` and `link export -c FILE [--host NAME]`. */
#include "app/link_cmd.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "app/config.h"
#include "app/link.h"

typedef enum lc_msg_id {
	LC_USAGE,
	LC_BAD_LINK,
	LC_HYSTERIA2,
	LC_CANNOT_EXPORT,
	LC_NOTHING,
	LC_CONFIG_INVALID,
	LC_UNKNOWN_ARG,
	LC_MISSING_ARGUMENT,
	LC_NO_CONFIG,
	LC_NOMEM,
	LC_MSG_COUNT_,
} lc_msg_id;

/* Every line `link` prints itself; a bad link's detail is link.c's. */
static const char *const msgs[LC_MSG_COUNT_] = {
	[LC_USAGE] = "Usage: etemenanki-app link import LINK\n"
		     "       etemenanki-app link export -c FILE [--host NAME]\n"
		     "\n"
		     "import prints the [[outbound]] block for a vless://, vmess://, trojan://, ss://\n"
		     "or hysteria2:// link. export prints one link per user of each trojan, vless,\n"
		     "vmess and shadowsocks inbound of FILE, for clients that dial NAME (default:\n"
		     "the inbound's listen address).\n"
		     "\n"
		     "Documentation: docs/links.md\n",
	[LC_BAD_LINK] = "etemenanki-app: bad link: %s\n",
	[LC_HYSTERIA2] = "etemenanki-app: note: hysteria2 outbounds are parsed but cannot run in this "
			 "build; a start refuses them\n",
	[LC_CANNOT_EXPORT] = "etemenanki-app: cannot export: %s\n",
	[LC_NOTHING] = "etemenanki-app: %s has no trojan, vless, vmess or shadowsocks inbound to "
		       "export\n",
	[LC_CONFIG_INVALID] = "configuration invalid: %s\n",
	[LC_UNKNOWN_ARG] = "etemenanki-app: link: unexpected argument `%s` (see link --help)\n",
	[LC_MISSING_ARGUMENT] = "etemenanki-app: link: `%s` needs a value (see link --help)\n",
	[LC_NO_CONFIG] = "etemenanki-app: link export: no configuration file given; use -c FILE\n",
	[LC_NOMEM] = "etemenanki-app: out of memory\n",
};

/* The formats are the constant table above; nothing from input is a format. */
#define say(f, id, ...) fprintf(f, msgs[id], __VA_ARGS__)
#define say0(f, id) fputs(msgs[id], f)

static int import(const char *text, FILE *out, FILE *err)
{
	etm_outbound_spec o = {0};
	link_error e;
	char line[LINK_LINE_MAX];
	if (link_import(text, strlen(text), &o, &e)) {
		say(err, LC_BAD_LINK, link_error_format(&e, line, sizeof line));
		return 2;
	}
	char *toml = malloc(LINK_TOML_MAX);
	int n = toml ? link_toml_write(&o, toml, LINK_TOML_MAX) : LINK_E_NOMEM;
	if (n >= 0) {
		fputs(toml, out);
		if (o.protocol == ETM_PROTO_HYSTERIA2)
			say0(err, LC_HYSTERIA2);
	} else {
		say0(err, LC_NOMEM); /* LINK_TOML_MAX holds any link's block */
	}
	free(toml);
	link_outbound_free(&o);
	return n >= 0 ? 0 : 1;
}

/* The links of one inbound, with a buffer grown until they fit. */
static int export_one(const etm_inbound_spec *in, const char *host, FILE *out, FILE *err)
{
	size_t size = 16384;
	for (;;) {
		char *buf = malloc(size);
		link_error e;
		char line[LINK_LINE_MAX];
		int n = buf ? link_export_inbound(in, host, buf, size, &e) : LINK_E_NOMEM;
		if (n >= 0)
			fputs(buf, out);
		free(buf);
		if (n >= 0)
			return 0;
		if (n == LINK_E_SPACE && size < (64u << 20)) {
			size *= 4;
			continue;
		}
		if (n == LINK_E_NOMEM || n == LINK_E_SPACE) {
			say0(err, LC_NOMEM);
			return 1;
		}
		say(err, LC_CANNOT_EXPORT, link_error_format(&e, line, sizeof line));
		return 2;
	}
}

static int export(const char *path, const char *host, FILE *out, FILE *err)
{
	etm_spec spec = {0};
	char msg[CONFIG_MSG_MAX];
	if (config_load_file(path, &spec, msg, sizeof msg)) {
		say(err, LC_CONFIG_INVALID, msg);
		return 1;
	}
	int rc = 0;
	size_t exported = 0;
	for (size_t i = 0; i < spec.inbounds_len && rc == 0; i++) {
		if (!link_exportable(spec.inbounds[i].protocol))
			continue;
		exported++;
		rc = export_one(&spec.inbounds[i], host, out, err);
	}
	if (rc == 0 && exported == 0) {
		say(err, LC_NOTHING, path);
		rc = 1;
	}
	etm_spec_free(&spec);
	return rc;
}

int link_cmd_main(int argc, char **argv, FILE *out, FILE *err)
{
	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		say0(argc < 2 ? err : out, LC_USAGE);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "import") == 0) {
		if (argc < 3) {
			say(err, LC_MISSING_ARGUMENT, "import");
			return 2;
		}
		if (argc > 3) {
			say(err, LC_UNKNOWN_ARG, argv[3]);
			return 2;
		}
		return import(argv[2], out, err);
	}
	if (strcmp(argv[1], "export") != 0) {
		say(err, LC_UNKNOWN_ARG, argv[1]);
		return 2;
	}
	const char *config = NULL, *host = NULL;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		bool is_c = strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0;
		if (!is_c && strcmp(a, "--host") != 0) {
			say(err, LC_UNKNOWN_ARG, a);
			return 2;
		}
		if (i + 1 >= argc) {
			say(err, LC_MISSING_ARGUMENT, a);
			return 2;
		}
		*(is_c ? &config : &host) = argv[++i];
	}
	if (!config) {
		say0(err, LC_NO_CONFIG);
		return 2;
	}
	return export(config, host, out, err);
}
