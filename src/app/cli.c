/* cli.c - option parsing and the top-level flow of etemenanki-app. */
#include "app/cli.h"

#include <stdbool.h>
#include <string.h>

#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <sys/resource.h>
#include <uv.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <ares.h>
#include <nghttp2/nghttp2.h>
#include "crypto/ossl.h"
#include <pcre2.h>
#include <wslay/wslayver.h>

#include "commit.h" /* generated from app/commit.h.in */
#include "app/api.h"
#include "app/api_http.h"
#include "app/config.h"
#include "app/link_cmd.h"
#include "app/metrics_http.h"
#include "app/notify.h"
#include "app/reload.h"
#include "app/upgrade.h"
#include "base/access_log.h"
#include "base/log.h"
#include "etemenanki/etemenanki.h"
#include "etemenanki/supervisor.h"

typedef enum cli_msg_id {
	CLI_USAGE,
	CLI_VERSION,
	CLI_CONFIG_OK,
	CLI_CONFIG_INVALID,
	CLI_START_FAILED,
	CLI_UNKNOWN_OPTION,
	CLI_MISSING_ARGUMENT,
	CLI_NO_CONFIG,
	CLI_BAD_LEVEL,
	CLI_LOADED,
	CLI_STOPPING,
	CLI_STOPPED,
	CLI_NO_SYSTEMD,
	CLI_PASSED,
	CLI_HUP_DRAINING,
	CLI_REPEATED,
	CLI_REPEATED_CONFIG,
	CLI_NO_VALUE_WANTED,
	CLI_JSON_HINT,
	CLI_MSG_COUNT_,
} cli_msg_id;

/* Where the docs folder is installed (src/meson.build defines it). */
#ifndef ETM_DOCDIR
#define ETM_DOCDIR "/usr/local/share/doc/etemenanki" /* meson's default prefix */
#endif

/* Every line the CLI itself prints. "Configuration OK.", "configuration
 * invalid: " and "failed to start: " are the seeds' words (seed 003). */
static const char *const msgs[CLI_MSG_COUNT_] = {
	[CLI_USAGE] = "Usage: etemenanki-app -c FILE [--test] [-l LEVEL]\n"
		      "       etemenanki-app run|check -c FILE [-l LEVEL]\n"
		      "       etemenanki-app version\n"
		      "       etemenanki-app link import LINK\n"
		      "       etemenanki-app link export -c FILE [--host NAME]\n"
		      "\n"
		      "Runs the proxy described by the TOML file FILE.\n"
		      "\n"
		      "Options:\n"
		      "  -c, --config FILE     the configuration file (required)\n"
		      "  -t, --test            check the configuration, print \"Configuration OK.\" and "
		      "exit\n"
		      "  -l, --log-level LEVEL override [log] level: error, warn (or warning), info,\n"
		      "                        debug, trace\n"
		      "  -V, --version         print the version and exit\n"
		      "  -h, --help            print this help and exit\n"
		      "\n"
		      "A value may follow its option after `=` (--config=FILE). run is a start,\n"
		      "check is --test, version is --version. The exit status is 0, 1 when the\n"
		      "start fails or --test finds the file bad, 2 on a usage error, 78 when a\n"
		      "start finds the file bad (docs/cli.md).\n"
		      "\n"
		      "link import prints the [[outbound]] block of a share link; link export\n"
		      "prints the share links of FILE's users (docs/links.md).\n"
		      "\n"
		      "Documentation: " ETM_DOCDIR "/README.md (docs/ in the source tree)\n",
	[CLI_VERSION] = "etemenanki-app %s (commit %s)\nlibuv %s, %s, c-ares %s, nghttp2 %s, "
	                "wslay %s, PCRE2 %s, %s\n",
	[CLI_CONFIG_OK] = "Configuration OK.\n",
	[CLI_CONFIG_INVALID] = "configuration invalid: %s\n",
	[CLI_START_FAILED] = "failed to start: %s\n",
	[CLI_UNKNOWN_OPTION] = "etemenanki-app: unknown option `%s` (see --help)\n",
	[CLI_MISSING_ARGUMENT] = "etemenanki-app: option `%s` needs a value (see --help)\n",
	[CLI_NO_CONFIG] = "etemenanki-app: no configuration file given; use -c FILE (see --help)\n",
	[CLI_BAD_LEVEL] = "etemenanki-app: unknown log level `%s` (expected " LOG_LEVEL_WORDS_TEXT
			  ")\n",
	[CLI_LOADED] = "loaded %s: %zu inbounds, %zu outbounds, %zu balancers, %zu rules",
	[CLI_STOPPING] = "%s received, stopping",
	[CLI_STOPPED] = "stopped",
	[CLI_NO_SYSTEMD] = "no libsystemd",
	[CLI_PASSED] = "socket activation: sockets passed: %zu",
	[CLI_HUP_DRAINING] = "SIGHUP ignored: this process drains after an upgrade; the new one "
			     "reloads",
	[CLI_REPEATED] = "etemenanki-app: option `%.*s` is given twice; it takes one value (see "
			 "--help)\n",
	[CLI_REPEATED_CONFIG] = "etemenanki-app: option `%.*s` is given twice; one configuration "
				"file is read, never a merge of several (see --help)\n",
	[CLI_NO_VALUE_WANTED] = "etemenanki-app: option `%.*s` takes no value (see --help)\n",
	[CLI_JSON_HINT] = "hint: the configuration file must be TOML, and this one looks like JSON; "
			  ETM_DOCDIR "/config.md has the TOML keys\n",
};

/* The formats are the constant table above; nothing from input is a format. */
#define say(f, id, ...) fprintf(f, msgs[id], __VA_ARGS__)
#define say0(f, id) fputs(msgs[id], f)

/* libsystemd has no run-time version call: the one built against. */
#ifdef ETM_LIBSYSTEMD_VERSION
#define SYSTEMD_VERSION "libsystemd " ETM_LIBSYSTEMD_VERSION
#else
#define SYSTEMD_VERSION msgs[CLI_NO_SYSTEMD]
#endif

typedef struct cli_opts {
	char *const *argv; /* main's: an upgrade starts the new binary with them */
	const char *config; /* borrowed from argv */
	bool test;
	bool level_set;
	int level; /* a LOG_LEVEL_* */
} cli_opts;

/* The options that take a value: "-c FILE", "--config FILE" and
 * "--config=FILE" (the long ones only), the same for the level. */
typedef enum cli_opt { OPT_NONE, OPT_CONFIG, OPT_LEVEL } cli_opt;

static cli_opt value_option(const char *a, const char **inline_value)
{
	static const struct {
		const char *name;
		cli_opt opt;
	} takes[] = {{"-c", OPT_CONFIG}, {"--config", OPT_CONFIG},
	             {"-l", OPT_LEVEL},  {"--log-level", OPT_LEVEL}};
	*inline_value = NULL;
	for (size_t i = 0; i < sizeof takes / sizeof *takes; i++) {
		size_t n = strlen(takes[i].name);
		if (strncmp(a, takes[i].name, n) != 0)
			continue;
		if (a[n] == '\0')
			return takes[i].opt;
		if (a[n] == '=' && a[1] == '-') {
			*inline_value = a + n + 1;
			return takes[i].opt;
		}
	}
	return OPT_NONE;
}

/* "--test=x": a flag given a value; the flag's name is the part before '='. */
static bool is_flag(const char *a, const char *shorter, const char *longer, bool *with_value)
{
	size_t n = strlen(longer);
	*with_value = strncmp(a, longer, n) == 0 && a[n] == '=';
	return strcmp(a, shorter) == 0 || strcmp(a, longer) == 0 || *with_value;
}

static void print_version(FILE *out)
{
	char pcre2[32] = "?";
	if (pcre2_config(PCRE2_CONFIG_VERSION, pcre2) < 0)
		(void)snprintf(pcre2, sizeof pcre2, "?");
	say(out, CLI_VERSION, etm_version(), ETM_COMMIT, uv_version_string(),
	    OpenSSL_version(OPENSSL_VERSION), ares_version(NULL), nghttp2_version(0)->version_str,
	    WSLAY_VERSION, pcre2, SYSTEMD_VERSION);
}

/* Returns -1 to go on, else the exit code. argv[first..] are the options. */
static int parse(int first, int argc, char **argv, cli_opts *o, FILE *out, FILE *err)
{
	bool given[OPT_LEVEL + 1] = {0};
	for (int i = first; i < argc; i++) {
		const char *a = argv[i];
		const char *value;
		cli_opt opt = value_option(a, &value);
		bool with_value = false;
		if (opt != OPT_NONE) {
			if (!value && i + 1 >= argc) {
				say(err, CLI_MISSING_ARGUMENT, a);
				return 2;
			}
			if (!value)
				value = argv[++i];
			if (given[opt]) { /* never a silent replacement */
				int name_len = (int)strcspn(a, "=");
				fprintf(err, msgs[opt == OPT_CONFIG ? CLI_REPEATED_CONFIG : CLI_REPEATED],
				        name_len, a);
				return 2;
			}
			given[opt] = true;
		}
		if (is_flag(a, "-h", "--help", &with_value) ||
		    is_flag(a, "-V", "--version", &with_value) ||
		    is_flag(a, "-t", "--test", &with_value)) {
			if (with_value) {
				fprintf(err, msgs[CLI_NO_VALUE_WANTED], (int)(strchr(a, '=') - a), a);
				return 2;
			}
			if (a[1] == 'h' || a[2] == 'h') {
				say0(out, CLI_USAGE);
				return 0;
			}
			if (a[1] == 'V' || a[2] == 'v') {
				print_version(out);
				return 0;
			}
			o->test = true;
		} else if (opt == OPT_CONFIG) {
			o->config = value;
		} else if (opt == OPT_LEVEL) {
			o->level = log_level_parse(value, strlen(value));
			if (o->level < 0) {
				say(err, CLI_BAD_LEVEL, value);
				return 2;
			}
			o->level_set = true;
		} else {
			say(err, CLI_UNKNOWN_OPTION, a);
			return 2;
		}
	}
	if (!o->config) {
		say0(err, CLI_NO_CONFIG);
		return 2;
	}
	return -1;
}

/* A proxy holds two sockets a flow; the default soft limit of 1024 would cap
 * it near 500 flows. Raise the soft limit to the hard one. */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* What the control thread's signal handlers act on (their data). */
typedef struct app {
	reloader *rl; /* NULL before the engine runs and once an upgrade drains */
	upgrader *up; /* NULL before the engine runs */
	etm_supervisor *sup;
	metrics_http *metrics; /* NULL when [metrics] listen is absent */
	api_http *api;         /* NULL when [api] listen is absent */
	metrics_reloads reloads;
} app;

/* PUT /configs: a reload as SIGHUP's, with its outcome. */
static int api_reload(void *arg, char *err, size_t err_size)
{
	app *a = arg;
	if (upgrader_draining(a->up) || !a->rl) {
		snprintf(err, err_size, "%s", msgs[CLI_HUP_DRAINING]);
		return -1;
	}
	return reloader_run(a->rl, "api", err, err_size);
}

/* A reload's new spec becomes the API's view once it is applied. */
static void *api_before(void *arg, const etm_spec *spec)
{
	app *a = arg;
	api_view *v = malloc(sizeof *v);
	if (!a->api || !v || api_view_init(v, spec)) {
		free(v);
		return NULL;
	}
	return v;
}

static void api_after(void *arg, void *state, bool applied)
{
	app *a = arg;
	api_view *v = state;
	if (!v)
		return;
	if (applied && a->api)
		api_http_set_view(a->api, v);
	api_view_free(v);
	free(v);
}

/* SIGHUP: reload the config file, unless the process drains after an
 * upgrade (the new one owns the config). */
static void on_hup(uv_signal_t *h, int signum)
{
	(void)signum;
	app *a = h->data;
	if (upgrader_draining(a->up))
		log_info("app", "%s", msgs[CLI_HUP_DRAINING]);
	else if (a->rl)
		reloader_now(a->rl, "SIGHUP");
}

static void on_signal(uv_signal_t *h, int signum)
{
	app *a = h->data;
	log_info("app", msgs[CLI_STOPPING], signum == SIGINT ? "SIGINT" : "SIGTERM");
	/* after an upgrade the service is the new process's: not stopping */
	if (!upgrader_draining(a->up))
		notify_stopping();
	uv_stop(h->loop);
}

/* SIGUSR1: the udp_lb counters on stderr (the admin API has them as
 * GET /udp-lb). */
static void on_usr1(uv_signal_t *h, int signum)
{
	(void)signum;
	app *a = h->data;
	if (a->sup)
		etm_supervisor_write_metrics(a->sup, stderr);
}

/* SIGUSR2: start the new binary with the listening sockets. */
static void on_usr2(uv_signal_t *h, int signum)
{
	(void)signum;
	app *a = h->data;
	if (a->up)
		upgrader_start(a->up);
}

/* The new process serves: reloads are its business now, and so are
 * scrapes (its endpoint shares the address, SO_REUSEPORT). */
static void on_upgrade_serving(void *data)
{
	app *a = data;
	reloader_stop(a->rl);
	a->rl = NULL;
	metrics_http_stop(a->metrics);
	a->metrics = NULL;
	api_http_stop(a->api);
	a->api = NULL;
}

static void close_handle(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

/* The sockets passed in (socket activation, an upgrade) go to the engine
 * before it starts. */
static void take_passed(void)
{
	int passed[ETM_INHERITED_MAX];
	size_t n_passed = notify_listen_fds(passed, ETM_INHERITED_MAX);
	if (n_passed)
		log_info("app", msgs[CLI_PASSED], n_passed);
	etm_supervisor_inherit(passed, n_passed);
	size_t n_up = upgrade_passed_fds(passed, ETM_INHERITED_MAX);
	etm_supervisor_inherit_upgrade(passed, n_up);
}

/* Every inbound listens on every worker: the service manager hears it,
 * and an old process waiting for this one (the manager first, so it
 * follows this process before the old one exits). */
static void tell_ready(void)
{
	if (upgrade_awaited())
		notify_mainpid();
	notify_ready();
	upgrade_tell_ready();
}

/* The control thread: start the engine, reload it on SIGHUP or a save of
 * the file, upgrade on SIGUSR2, stop on SIGINT or SIGTERM or at the end of
 * an upgrade's drain. */
static int run(etm_spec *spec, const cli_opts *o, FILE *err)
{
	char msg[CONFIG_MSG_MAX];
	signal(SIGPIPE, SIG_IGN); /* a peer's reset is an error value, not a signal */
	raise_fd_limit();
	/* The handlers come first: a signal during the start is kept by libuv
	 * and handled as soon as the loop runs, so it still exits cleanly. */
	uint64_t start_time = (uint64_t)time(NULL);
	/* the spec goes to the engine; the endpoint's address stays here */
	char *metrics_listen = spec->metrics_listen ? strdup(spec->metrics_listen) : NULL;
	char *api_listen = spec->api_listen ? strdup(spec->api_listen) : NULL;
	/* what the API shows of the config, copied before the engine takes it */
	api_view view = {0};
	bool view_ok = !api_listen || api_view_init(&view, spec) == 0;
	uv_loop_t loop;
	uv_signal_t sigint, sigterm, sigusr1, sigusr2, sighup;
	app a = {0};
	uv_loop_init(&loop);
	uv_signal_t *sigs[] = {&sigint, &sigterm, &sigusr1, &sigusr2, &sighup};
	for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
		uv_signal_init(&loop, sigs[i]);
		sigs[i]->data = &a;
	}
	uv_signal_start(&sigint, on_signal, SIGINT);
	uv_signal_start(&sigterm, on_signal, SIGTERM);
	uv_signal_start(&sigusr1, on_usr1, SIGUSR1);
	uv_signal_start(&sigusr2, on_usr2, SIGUSR2);
	uv_signal_start(&sighup, on_hup, SIGHUP); /* kept until the engine runs */
	/* socket activation and upgrades: inbounds on a passed socket's
	 * address serve on it */
	take_passed();
	etm_supervisor *sup;
	int rc = view_ok ? etm_supervisor_start(spec, &sup, msg, sizeof msg) : -1;
	if (!view_ok)
		snprintf(msg, sizeof msg, "%s", api_http_message(API_HTTP_NOMEM));
	etm_supervisor_inherit_release(); /* the listeners hold their own copies */
	if (rc == 0 && metrics_listen) {
		a.metrics = metrics_http_start(&loop, metrics_listen, sup, &a.reloads, start_time, msg,
		                               sizeof msg);
		if (!a.metrics) {
			etm_supervisor_stop(sup);
			rc = -1;
		}
	}
	if (rc == 0 && api_listen) {
		api_http_conf conf = {.listen = api_listen,
		                      .sup = sup,
		                      .reloads = &a.reloads,
		                      .start_time = start_time,
		                      .metrics = &a.metrics,
		                      .reload = api_reload,
		                      .reload_arg = &a};
		a.api = api_http_start(&loop, &conf, &view, msg, sizeof msg);
		if (!a.api) {
			metrics_http_stop(a.metrics);
			a.metrics = NULL;
			etm_supervisor_stop(sup);
			rc = -1;
		}
	}
	api_view_free(&view);
	if (rc) {
		etm_spec_free(spec);
		say(err, CLI_START_FAILED, msg);
	} else {
		a.sup = sup;
		a.up = upgrader_new(&loop, sup, o->argv, on_upgrade_serving, &a);
		tell_ready();
		reload_hook hook = {.before = api_before,
		                    .after = api_after,
		                    .arg = &a,
		                    .api_listen = api_listen};
		a.rl = reloader_start(&loop, o->config, sup, o->level_set, &a.reloads,
		                      metrics_listen, &hook);
		uv_run(&loop, UV_RUN_DEFAULT);
		reloader_stop(a.rl);
		metrics_http_stop(a.metrics);
		api_http_stop(a.api);
		upgrader_del(a.up);
		a = (app){0};
		etm_supervisor_stop(sup);
	}
	uv_walk(&loop, close_handle, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	(void)uv_loop_close(&loop);
	free(metrics_listen);
	free(api_listen);
	if (rc)
		return 1;
	log_info("app", "%s", msgs[CLI_STOPPED]);
	return 0;
}

/* The first bytes a look at a refused file reads for the JSON hint: a
 * JSON document's first non-space byte comes early. */
#define JSON_SNIFF_BYTES 256

/* A file TOML could not parse that looks like JSON: its name ends in
 * .json, or its first non-space byte is '{'. */
static bool looks_like_json(const char *path, const char *msg)
{
	static const char toml_error[] = "TOML parse error";
	if (strncmp(msg, toml_error, sizeof toml_error - 1) != 0)
		return false;
	size_t n = strlen(path);
	if (n >= 5 && strcmp(path + n - 5, ".json") == 0)
		return true;
	FILE *f = fopen(path, "rb");
	if (!f)
		return false;
	char buf[JSON_SNIFF_BYTES];
	size_t got = fread(buf, 1, sizeof buf, f);
	fclose(f);
	for (size_t i = 0; i < got; i++) {
		if (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r')
			continue;
		return buf[i] == '{';
	}
	return false;
}

/* The subcommands, words for today's flags: `run -c FILE` is a start,
 * `check -c FILE` is --test, `version` is --version. */
static int subcommand(int argc, char **argv, cli_opts *o)
{
	if (argc < 2)
		return 1;
	if (strcmp(argv[1], "run") == 0)
		return 2;
	if (strcmp(argv[1], "check") == 0) {
		o->test = true;
		return 2;
	}
	return 1;
}

int cli_main(int argc, char **argv, FILE *out, FILE *err)
{
	if (argc >= 2 && strcmp(argv[1], "link") == 0)
		return link_cmd_main(argc - 1, argv + 1, out, err);
	if (argc == 2 && strcmp(argv[1], "version") == 0) {
		print_version(out);
		return 0;
	}
	cli_opts o = {.argv = argv};
	int rc = parse(subcommand(argc, argv, &o), argc, argv, &o, out, err);
	if (rc >= 0)
		return rc;

	etm_spec spec;
	char msg[CONFIG_MSG_MAX];
	if (config_load_file(o.config, &spec, msg, sizeof msg)) {
		say(err, o.test ? CLI_CONFIG_INVALID : CLI_START_FAILED, msg);
		if (looks_like_json(o.config, msg))
			say0(err, CLI_JSON_HINT);
		return o.test ? 1 : CLI_EXIT_CONFIG;
	}
	if (o.test) {
		rc = etm_supervisor_check(&spec, msg, sizeof msg);
		if (rc == 0)
			rc = access_log_check(spec.log_access, msg, sizeof msg);
		etm_spec_free(&spec);
		if (rc) {
			say(err, CLI_CONFIG_INVALID, msg);
			return 1;
		}
		say0(out, CLI_CONFIG_OK);
		return 0;
	}

	log_set_format(config_log_format(spec.log_format));
	log_set_level(o.level_set ? o.level : config_log_level(spec.log_level));
	access_log_set_end(spec.log_access_end);
	log_info("app", msgs[CLI_LOADED], o.config, spec.inbounds_len, spec.outbounds_len,
	         spec.balancers_len, spec.route.rules_len);
	if (etm_spec_check_available(&spec, msg, sizeof msg)) {
		etm_spec_free(&spec);
		say(err, CLI_START_FAILED, msg);
		return CLI_EXIT_CONFIG;
	}
	if (access_log_open(spec.log_access, msg, sizeof msg)) {
		etm_spec_free(&spec);
		say(err, CLI_START_FAILED, msg);
		return 1;
	}
	rc = run(&spec, &o, err);
	access_log_close(); /* the workers have stopped */
	return rc;
}
