"""etemenanki-app's command line against the seed's recipe and its "Common errors" table."""
import json
import pathlib
import subprocess
import re
import socket
import time

import pytest

import proxykit

ROOT = pathlib.Path(__file__).resolve().parents[2]
FAILOVER = ROOT / "examples" / "failover.toml"


def edit_one_line(text, old, new):
    """The recipe with exactly one line changed; the line must occur once."""
    lines = text.split("\n")
    hits = [i for i, line in enumerate(lines) if line == old]
    assert len(hits) == 1, f"{old!r} occurs {len(hits)} times"
    lines[hits[0]] = new
    return "\n".join(lines)


def gutter(line):
    """The blank gutter of the toml crate's excerpt: as wide as the line number."""
    return " " * len(str(line))


def test_the_recipe_builds_as_written(run):
    """--test is the whole build (issue 22): the seed's recipe, whose third
    member is VMess over gRPC and TLS (issue 17), builds as written.
    tests/e2e/test_recipe.py runs it against servers of ours."""
    r = run("--test", "-c", str(FAILOVER))
    assert (r.returncode, r.stdout, r.stderr) == (0, "Configuration OK.\n", "")


def test_the_quickstart_is_valid(run):
    r = run("--test", "-c", str(ROOT / "examples" / "quickstart.toml"))
    assert (r.returncode, r.stdout) == (0, "Configuration OK.\n")


def test_the_live_route_change_example_is_valid(run):
    r = run("--test", "-c", str(ROOT / "examples" / "live-route-change.toml"))
    assert (r.returncode, r.stdout) == (0, "Configuration OK.\n")


def test_the_udp_lb_example_is_valid(run):
    r = run("--test", "-c", str(ROOT / "examples" / "udp-lb.toml"))
    assert (r.returncode, r.stdout) == (0, "Configuration OK.\n")


# One row per line of seed 003 "Common errors" (and the duplicate-tag check of
# seed 000): the one-line edit, then the exact message.
COMMON_ERRORS = [
    ('outbounds = ["primary", "secondary", "tertiary"]',
     'outbounds = ["primary", "secondary", "direct"]',
     "balancer upstream: outbound direct has no upstream a TCP health probe can reach, "
     "so it cannot be balanced"),
    ('outbounds = ["primary", "secondary", "tertiary"]',
     'outbounds = ["primary", "secondry", "tertiary"]',
     "balancer upstream references unknown outbound tag: secondry"),
    ('tag = "upstream"', 'tag = "primary"',
     "balancer tag primary collides with an outbound tag"),
    ('outbounds = ["primary", "secondary", "tertiary"]', 'outbounds = []',
     "a balancer needs at least one outbound"),
    ('strategy = "failover"   # the default, written out for clarity', 'strategy = "roundrobin"',
     'unknown balancer strategy "roundrobin" (expected "failover" or "round_robin")'),
    ('strategy = "failover"   # the default, written out for clarity', 'strategy = "Failover"',
     'unknown balancer strategy "Failover" (expected "failover" or "round_robin")'),
    ('default = "upstream"', 'default = "upstreem"',
     "route references unknown outbound tag: upstreem"),
    ('outbound = "direct"', 'outbound = "drect"',
     "route references unknown outbound tag: drect"),
    ('tag = "secondary"', 'tag = "primary"', "duplicate outbound tag: primary"),
]


@pytest.mark.parametrize("old,new,message", COMMON_ERRORS, ids=[m for _, _, m in COMMON_ERRORS])
def test_common_errors_word_for_word(run, tmp_path, old, new, message):
    cfg = tmp_path / "config.toml"
    cfg.write_text(edit_one_line(FAILOVER.read_text(), old, new))

    r = run("--test", "-c", str(cfg))
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr == f"configuration invalid: {message}\n"

    # a start refuses it with EX_CONFIG, the status the unit does not
    # restart on (issue 32 item 4)
    r = run("-c", str(cfg))
    assert r.returncode == 78
    assert r.stderr == f"failed to start: {message}\n"


def test_a_misspelt_balancer_key_is_a_parse_error(run, tmp_path):
    cfg = tmp_path / "config.toml"
    text = edit_one_line(FAILOVER.read_text(),
                         "probe_interval = 15     # seconds between probes of each member (default 30)",
                         "probe_intervall = 15")
    cfg.write_text(text)
    line = text.split("\n").index("probe_intervall = 15") + 1
    r = run("--test", "-c", str(cfg))
    assert r.returncode == 1
    assert r.stderr == (
        f"configuration invalid: TOML parse error at line {line}, column 1\n"
        f"{gutter(line)} |\n"
        f"{line} | probe_intervall = 15\n"
        f"{gutter(line)} | ^^^^^^^^^^^^^^^\n"
        "unknown field `probe_intervall`, expected one of `tag`, `outbounds`, `strategy`, "
        "`probe_interval`, `probe_timeout`, `rise`, `fall`, `retry`\n")


def test_a_duration_string_is_a_type_error(run, tmp_path):
    cfg = tmp_path / "config.toml"
    text = edit_one_line(FAILOVER.read_text(),
                         "probe_interval = 15     # seconds between probes of each member (default 30)",
                         'probe_interval = "30s"')
    cfg.write_text(text)
    line = text.split("\n").index('probe_interval = "30s"') + 1
    r = run("--test", "-c", str(cfg))
    assert r.returncode == 1
    assert r.stderr == (
        f"configuration invalid: TOML parse error at line {line}, column 18\n"
        f"{gutter(line)} |\n"
        f'{line} | probe_interval = "30s"\n'
        f"{gutter(line)} |                  ^^^^^\n"
        'invalid type: string "30s", expected u64\n')


def test_a_negative_timeout_is_refused(run, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(edit_one_line(FAILOVER.read_text(),
                                 "probe_timeout = 5       # seconds a probe may take (default 5)",
                                 "probe_timeout = -5"))
    r = run("--test", "-c", str(cfg))
    assert r.returncode == 1
    assert r.stderr.endswith("\ninvalid value: integer `-5`, expected u64\n")


def test_a_toml_syntax_error_names_the_line(run, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(edit_one_line(FAILOVER.read_text(), 'tag = "upstream"', 'tag = "upstream'))
    r = run("--test", "-c", str(cfg))
    assert r.returncode == 1
    assert re.match(r"configuration invalid: TOML parse error at line \d+, column \d+\n", r.stderr)


def test_a_missing_file(run, tmp_path):
    missing = tmp_path / "nope.toml"
    r = run("--test", "-c", str(missing))
    assert r.returncode == 1
    assert r.stderr == f"configuration invalid: failed to read {missing}: No such file or directory\n"


NOT_BUILT = """
[[inbound]]
tag = "hy-in"
protocol = "hysteria2"
port = 8443
[[inbound.settings.users]]
password = "secret"

[[outbound]]
tag = "direct"
protocol = "direct"
"""


def test_starting_says_what_is_not_built_yet(run, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(NOT_BUILT)
    r = run("-c", str(cfg))
    assert r.returncode == 78
    lines = r.stderr.splitlines()
    assert lines[-1] == "failed to start: inbound hy-in: protocol hysteria2 is not available yet"
    # the log line before it: time, level, target, message
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO  app: loaded .*config\.toml: "
        r"1 inbounds, 1 outbounds, 0 balancers, 0 rules", lines[0]), lines[0]


def test_log_level_option_overrides_the_file(run, tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(NOT_BUILT)
    r = run("-l", "error", "-c", str(cfg))
    assert r.returncode == 78
    assert r.stderr == "failed to start: inbound hy-in: protocol hysteria2 is not available yet\n"


def test_a_bad_log_level(run):
    r = run("-l", "loud", "-c", str(FAILOVER))
    assert r.returncode == 2
    assert r.stderr == ("etemenanki-app: unknown log level `loud` (expected error, warn, "
                        "warning, info, debug or trace)\n")


def built_commit():
    """The commit the binary names: the checkout's (make test builds it
    right before the tests), "unknown" outside git."""
    git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                         capture_output=True, text=True)
    return git.stdout.strip() if git.returncode == 0 else "unknown"


def test_version_and_help(run):
    r = run("--version")
    assert r.returncode == 0
    first, libraries = r.stdout.splitlines()
    assert first == f"etemenanki-app 0.1.0 (commit {built_commit()})"
    # libsystemd: the version built against, or "no libsystemd" (docs/install.md)
    assert re.fullmatch(r"libuv \d+\.\d+\.\d+, OpenSSL \d+\.\d+\.\d+\S* .+, "
                        r"c-ares \d+\.\d+\.\d+, nghttp2 \d+\.\d+\.\d+, wslay \S+, "
                        r"PCRE2 \d+\.\d+ \S+, (libsystemd \d+|no libsystemd)",
                        libraries), libraries
    r = run("--help")
    assert r.returncode == 0
    assert r.stdout.startswith("Usage: etemenanki-app -c FILE [--test] [-l LEVEL]\n")


def test_usage_errors(run):
    r = run("--bogus")
    assert (r.returncode, r.stderr) == (2, "etemenanki-app: unknown option `--bogus` (see --help)\n")
    r = run("-c")
    assert (r.returncode, r.stderr) == (2, "etemenanki-app: option `-c` needs a value (see --help)\n")
    r = run("--test")
    assert r.returncode == 2
    assert r.stderr == "etemenanki-app: no configuration file given; use -c FILE (see --help)\n"


# ---------------------------------------------------------------- --test is the whole build
# Issue 22: --test builds what a start builds (TLS contexts, certificates,
# keys, CAs, what this build can run), without binding or dialling, and
# prints what a start would after "configuration invalid: ".

def make_pair(directory, name):
    """A self-signed certificate and its key, via the openssl CLI."""
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=30)
    return cert, key


def tls_socks_config(cert, key, extra=""):
    return ('[[inbound]]\ntag = "secure"\nprotocol = "socks"\nlisten = "127.0.0.1"\nport = 0\n'
            '[inbound.stream]\nnetwork = "tls"\n'
            f'[inbound.stream.tls]\ncertificate = "{cert}"\nkey = "{key}"\n\n'
            '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n\n' + extra)


def same_failure(run, path, start_status=1):
    """The message --test prints after "configuration invalid: ", checked to
    be what a start prints after "failed to start: " (exit start_status:
    78 for what the file asks and this build cannot run, docs/cli.md)."""
    t = run("--test", "-c", str(path))
    assert (t.returncode, t.stdout) == (1, ""), t.stderr
    assert t.stderr.startswith("configuration invalid: "), t.stderr
    said = t.stderr[len("configuration invalid: "):].rstrip("\n")
    s = run("-c", str(path), timeout=5)
    assert s.returncode == start_status, s.stderr
    assert s.stderr.splitlines()[-1] == "failed to start: " + said
    return said


def test_the_test_of_a_good_tls_config_passes(run, tmp_path):
    cert, key = make_pair(tmp_path, "a")
    path = tmp_path / "c.toml"
    path.write_text(tls_socks_config(cert, key))
    r = run("--test", "-c", str(path))
    assert (r.returncode, r.stdout, r.stderr) == (0, "Configuration OK.\n", "")


def test_a_missing_certificate_fails_the_test(run, tmp_path):
    _, key = make_pair(tmp_path, "a")
    path = tmp_path / "c.toml"
    path.write_text(tls_socks_config(tmp_path / "gone.pem", key))
    said = same_failure(run, path)
    assert said.startswith("inbound secure: tls: "), said
    assert "gone.pem" in said, said


def test_a_missing_key_fails_the_test(run, tmp_path):
    cert, _ = make_pair(tmp_path, "a")
    path = tmp_path / "c.toml"
    path.write_text(tls_socks_config(cert, tmp_path / "gone.key"))
    said = same_failure(run, path)
    assert said.startswith("inbound secure: tls: "), said
    assert "gone.key" in said, said


def test_a_key_that_does_not_match_its_certificate_fails_the_test(run, tmp_path):
    cert, _ = make_pair(tmp_path, "a")
    _, other_key = make_pair(tmp_path, "b")
    path = tmp_path / "c.toml"
    path.write_text(tls_socks_config(cert, other_key))
    said = same_failure(run, path)
    assert said.startswith("inbound secure: tls: "), said


def test_a_missing_ca_fails_the_test(run, tmp_path):
    cert, key = make_pair(tmp_path, "a")
    path = tmp_path / "c.toml"
    path.write_text(tls_socks_config(cert, key, (
        '[[outbound]]\ntag = "up"\nprotocol = "trojan"\nserver = "127.0.0.1"\nport = 1\n'
        '[outbound.settings]\npassword = "p"\n[outbound.stream]\nnetwork = "tls"\n'
        f'[outbound.stream.tls]\nca = "{tmp_path / "gone-ca.pem"}"\n')))
    said = same_failure(run, path)
    assert said.startswith("outbound up: "), said
    assert "gone-ca.pem" in said, said


def test_a_protocol_this_build_cannot_run_fails_the_test(run, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[[inbound]]\ntag = "hy"\nprotocol = "hysteria2"\nlisten = "127.0.0.1"\n'
                    'port = 0\n[[inbound.settings.users]]\npassword = "secret"\n\n'
                    '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n')
    assert same_failure(run, path, 78) == "inbound hy: protocol hysteria2 is not available yet"


def test_sniffing_on_a_vmess_inbound_is_refused_not_ignored(run, tmp_path):
    """Issue 22: a key that would do nothing is refused. A vmess inbound's
    first bytes are sealed chunks, which this build does not sniff."""
    path = tmp_path / "c.toml"
    path.write_text('[[inbound]]\ntag = "vm"\nprotocol = "vmess"\nlisten = "127.0.0.1"\nport = 0\n'
                    'sniffing = true\n'
                    '[[inbound.settings.users]]\nid = "11111111-2222-3333-4444-555555555555"\n\n'
                    '[[outbound]]\ntag = "direct"\nprotocol = "freedom"\n')
    assert same_failure(run, path, 78) == ("inbound vm: sniffing on a vmess inbound is not "
                                       "available yet")


@pytest.mark.parametrize("protocol,mux,error", [
    ("socks", "enabled = true",
     "outbound up: mux needs a trojan, vless or vmess outbound, not socks"),
    ("vless", "enabled = true\nconcurrency = 0", "outbound up: mux.concurrency must be 1 to 128"),
    ("vless", "enabled = true\nconcurrency = 129",
     "outbound up: mux.concurrency must be 1 to 128"),
    ("vless", "enabled = true\nconcurrency = 128", None),
    ("vmess", "concurrency = 8", None),
])
def test_mux_settings_are_checked(run, tmp_path, protocol, mux, error):
    """[outbound.mux] (issue 17): the texts of a refused mux table."""
    cfg = tmp_path / "config.toml"
    settings = ('[outbound.settings]\nid = "6c1b0e6a-6e3d-4c1e-9d8a-1a2b3c4d5e6f"\n'
                if protocol != "socks" else "")
    cfg.write_text(f'[[inbound]]\ntag = "in"\nprotocol = "socks"\nport = 1080\n\n'
                   f'[[outbound]]\ntag = "up"\nprotocol = "{protocol}"\nserver = "127.0.0.1"\n'
                   f'port = 443\n{settings}[outbound.mux]\n{mux}\n')
    r = run("--test", "-c", str(cfg))
    if error is None:
        assert (r.returncode, r.stdout, r.stderr) == (0, "Configuration OK.\n", "")
    else:
        assert (r.returncode, r.stderr) == (1, f"configuration invalid: {error}\n")


# ---------------------------------------------------------------- link import / export
# Issue 22 item 7: share links (docs/links.md). The parser's cases are in
# tests/unit/test_link.c; these run the binary for its streams and exit codes.

LINK_UUID = "b831381d-6324-4d53-ad4f-8cda48b30811"


def test_link_import_prints_a_block_that_loads(run, tmp_path):
    r = run("link", "import", f"trojan://pw@t.example.com:8443?security=tls&sni=s.example.com#tj")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == ('[[outbound]]\ntag = "tj"\nprotocol = "trojan"\nserver = "t.example.com"\n'
                        'port = 8443\n\n[outbound.settings]\npassword = "pw"\n\n[outbound.stream]\n'
                        'security = "tls"\n\n[outbound.stream.tls]\nserver_name = "s.example.com"\n')
    config = tmp_path / "client.toml"
    config.write_text('[[inbound]]\ntag = "in"\nprotocol = "socks"\nport = 1080\n\n' + r.stdout)
    r = run("--test", "-c", str(config))
    assert (r.returncode, r.stdout) == (0, "Configuration OK.\n")


def test_link_import_hysteria2_says_it_cannot_run(run):
    r = run("link", "import", "hy2://pw@h.example.com#h")
    assert r.returncode == 0
    assert r.stdout.startswith("# hysteria2 is parsed and checked by the config, but this build "
                               "cannot run it:\n")
    assert r.stderr == ("etemenanki-app: note: hysteria2 outbounds are parsed but cannot run in "
                        "this build; a start refuses them\n")


BAD_LINKS = [
    ("socks5://h:1", "unknown scheme `socks5` (expected vless, vmess, trojan, ss, hysteria2 or hy2)"),
    (f"vless://{LINK_UUID}@example.com", "the link has no port"),
    (f"vless://{LINK_UUID}@example.com:99999", "bad port `99999` (expected a number in 1-65535)"),
    ("vless://1234@example.com:443", "bad UUID `1234` (expected 8-4-4-4-12 hex digits)"),
    ("vmess://not*base64", "bad base64 in the vmess link"),
    ("vmess://e3=", "bad base64 in the vmess link"),
    ("vmess://eyJhIjpbXX0=", "bad JSON in the vmess link at byte 6 (expected one flat object)"),
    ("ss://cmM0LW1kNTpwdw@example.com:1", "unknown method `rc4-md5`"),
    (f"vless://{LINK_UUID}@example.com:443?type=kcp", "unknown network `kcp` (expected tcp, ws or grpc)"),
]


@pytest.mark.parametrize("link,line", BAD_LINKS)
def test_link_import_bad_links(run, link, line):
    r = run("link", "import", link)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"etemenanki-app: bad link: {line}\n")


SERVER = f"""
[[inbound]]
tag = "tj"
protocol = "trojan"
listen = "0.0.0.0"
port = 443
[[inbound.settings.users]]
name = "ann"
password = "secret"
[inbound.stream]
security = "tls"
[inbound.stream.tls]
certificate = "cert.pem"
key = "key.pem"

[[inbound]]
tag = "vl"
protocol = "vless"
listen = "0.0.0.0"
port = 8443
[[inbound.settings.users]]
id = "{LINK_UUID}"
[inbound.stream]
network = "ws"
[inbound.stream.ws]
path = "/v"

[[inbound]]
tag = "ss"
protocol = "shadowsocks"
listen = "0.0.0.0"
port = 8388
[inbound.settings]
method = "aes-128-gcm"
password = "test"

[[outbound]]
tag = "direct"
protocol = "freedom"
"""


def test_link_export_then_import(run, tmp_path):
    config = tmp_path / "server.toml"
    config.write_text(SERVER)
    r = run("link", "export", "-c", str(config), "--host", "proxy.example")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.splitlines() == [
        "trojan://secret@proxy.example:443?type=tcp&security=tls#tj-ann",
        f"vless://{LINK_UUID}@proxy.example:8443?encryption=none&type=ws&path=%2Fv&security=none#vl",
        "ss://YWVzLTEyOC1nY206dGVzdA@proxy.example:8388#ss",
    ]
    for link in r.stdout.splitlines():
        back = run("link", "import", link)
        assert back.returncode == 0, back.stderr
        assert 'server = "proxy.example"\n' in back.stdout


def test_link_export_errors(run, tmp_path):
    config = tmp_path / "server.toml"
    config.write_text(SERVER)
    r = run("link", "export", "-c", str(config))
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", "etemenanki-app: cannot export: inbound tj listens on every address: give --host NAME\n")
    r = run("link", "export")
    assert (r.returncode, r.stderr) == (
        2, "etemenanki-app: link export: no configuration file given; use -c FILE\n")
    r = run("link", "export", "-c", str(ROOT / "examples" / "quickstart.toml"))
    assert (r.returncode, r.stderr) == (
        1, f"etemenanki-app: {ROOT / 'examples' / 'quickstart.toml'} has no trojan, vless, vmess "
           "or shadowsocks inbound to export\n")
    r = run("link", "frobnicate")
    assert (r.returncode, r.stderr) == (
        2, "etemenanki-app: link: unexpected argument `frobnicate` (see link --help)\n")


# ---------------------------------------------------------------- issue 32 item 2: CLI habits

def test_i32_long_options_take_their_value_after_an_equals_sign(run):
    """Issue 32 item 2: `--config=FILE` and `--log-level=LEVEL` as other
    tools accept them; a flag given a value is refused by name."""
    r = run("--test", f"--config={FAILOVER}", "--log-level=debug")
    assert (r.returncode, r.stdout, r.stderr) == (0, "Configuration OK.\n", "")
    r = run("--test=yes", "-c", str(FAILOVER))
    assert (r.returncode, r.stderr) == (
        2, "etemenanki-app: option `--test` takes no value (see --help)\n")


REPEATED_CONFIG = ("etemenanki-app: option `{}` is given twice; one configuration file is read, "
                   "never a merge of several (see --help)\n")
REPEATED = "etemenanki-app: option `{}` is given twice; it takes one value (see --help)\n"


@pytest.mark.parametrize("args,said", [
    (["-c", "a.toml", "-c", "b.toml"], REPEATED_CONFIG.format("-c")),
    (["-c", "a.toml", "--config=b.toml"], REPEATED_CONFIG.format("--config")),
    (["--config", "a.toml", "--config", "a.toml"], REPEATED_CONFIG.format("--config")),
    (["-l", "info", "--log-level=debug", "-c", "a.toml"], REPEATED.format("--log-level")),
])
def test_i32_a_repeated_option_is_refused_not_replaced(run, args, said):
    """Issue 32 item 2: a second -c used to replace the first silently;
    now it is refused, and no file is read."""
    r = run("--test", *args)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", said)


def test_i32_run_check_and_version_subcommands(run, tmp_path):
    """Issue 32 item 2: `check` is --test, `run` a start, `version` is
    --version, word for word what the flags print."""
    r = run("check", "-c", str(FAILOVER))
    assert (r.returncode, r.stdout, r.stderr) == (0, "Configuration OK.\n", "")
    assert run("version").stdout == run("--version").stdout
    assert run("version").returncode == 0
    cfg = tmp_path / "config.toml"
    cfg.write_text(NOT_BUILT)
    r = run("run", "-l", "error", "-c", str(cfg))
    assert r.stderr == "failed to start: inbound hy-in: protocol hysteria2 is not available yet\n"


@pytest.mark.parametrize("word", ["warn", "warning", "error", "info", "debug", "trace"])
def test_i32_one_set_of_level_words_for_cli_and_config(run, tmp_path, word):
    """Issue 32 item 2: `warning` (Clash's, Xray's, sing-box's word) and
    `warn` both, in -l and in [log] level (the API: tests/unit/test_api.c)."""
    r = run("--test", "-l", word, "-c", str(FAILOVER))
    assert (r.returncode, r.stderr) == (0, "")
    cfg = tmp_path / "c.toml"
    cfg.write_text(edit_one_line(FAILOVER.read_text(), 'level = "info"', f'level = "{word}"'))
    r = run("--test", "-c", str(cfg))
    assert (r.returncode, r.stderr) == (0, "")


JSON_HINT = ("hint: the configuration file must be TOML, and this one looks like JSON; "
             "{docdir}/config.md has the TOML keys\n")


def docdir(app):
    """The documentation folder of the build's prefix (dist/meson.build)."""
    build = pathlib.Path(app).resolve().parents[1]
    # what `meson introspect --buildoptions` prints, read without its start-up
    opts = json.loads((build / "meson-info" / "intro-buildoptions.json").read_text())
    o = {x["name"]: x["value"] for x in opts}
    return str(pathlib.Path(o["prefix"]) / o["datadir"] / "doc" / "etemenanki")


def test_i32_help_names_the_installed_docs(app, run):
    """Issue 32 item 3: --help points to the docs where `make install` puts
    them (and where they are in the source)."""
    r = run("--help")
    assert r.stdout.endswith(f"\nDocumentation: {docdir(app)}/README.md (docs/ in the source "
                             "tree)\n"), r.stdout


@pytest.mark.parametrize("name,text", [
    ("sing-box.json", '{\n  "log": {"level": "info"},\n  "inbounds": []\n}\n'),
    ("config.toml", '  \n{"inbounds": []}\n'),
    ("xray.json", '[[bad toml\n'),
])
def test_i32_a_json_config_gets_a_hint(app, run, tmp_path, name, text):
    """Issue 32 item 2: a file TOML cannot parse whose first byte is `{` or
    whose name ends .json: one more line says the file must be TOML, at
    --test (exit 1) and at a start (exit 78, docs/cli.md)."""
    cfg = tmp_path / name
    cfg.write_text(text)
    hint = JSON_HINT.format(docdir=docdir(app))
    r = run("--test", "-c", str(cfg))
    assert r.returncode == 1
    assert r.stderr.startswith("configuration invalid: TOML parse error at line ")
    assert r.stderr.endswith("\n" + hint), r.stderr
    r = run("-c", str(cfg))
    assert r.returncode == 78
    assert r.stderr.startswith("failed to start: TOML parse error at line ")
    assert r.stderr.endswith("\n" + hint), r.stderr


def test_i32_no_json_hint_for_a_toml_error(run, tmp_path):
    """The hint is for JSON only: a TOML file with a TOML error has none."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('[log]\nlevel = "info\n')
    r = run("--test", "-c", str(cfg))
    assert r.returncode == 1 and "hint:" not in r.stderr, r.stderr


# ---------------------------------------------------------------- issue 32 item 3: docs/README.md

def test_i32_docs_readme_names_every_inbound_and_the_recipe_starts(app, tmp_path):
    """Issue 32 item 3: docs/README.md said failover.toml "a start refuses
    it" and listed five inbounds. The recipe starts (it listens, then stops
    cleanly on SIGTERM), the page says no such thing, and its "What works
    today" names every inbound protocol a start runs: each one schema.c
    knows, but those the page lists as not run yet."""
    text = (ROOT / "docs" / "README.md").read_text()
    assert "a start refuses it" not in text
    schema = (ROOT / "src" / "app" / "schema.c").read_text()
    table = schema[schema.index("inbound_protocols[] = {"):]
    table = table[:table.index("};")]
    # the table's words for a protocol: "hysteria" and "hy2" are aliases
    names = {n for n in re.findall(r'\{"(\w+)", ETM_PROTO_', table) if n not in ("hysteria", "hy2")}
    works = text[text.index("## What works today"):]
    serves = works[:works.index(" outbounds")]
    not_run = {"hysteria2"} if "Hysteria2 and WireGuard are read and checked" in works else set()
    assert names - not_run, names
    for name in sorted(names - not_run):
        assert f"`{name}`" in serves, name
    cfg = tmp_path / "failover.toml"
    port = proxykit.free_port()
    cfg.write_text(FAILOVER.read_text().replace("port = 1080", f"port = {port}", 1))
    proc = subprocess.Popen([app, "-c", str(cfg)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex((proxykit.LOOPBACK, port)) == 0:
                    break
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        else:
            raise AssertionError("failover.toml does not listen")
    finally:
        proc.terminate()
        err = proc.communicate(timeout=20)[1]
    assert proc.returncode == 0, err
    assert "failed to start" not in err, err
