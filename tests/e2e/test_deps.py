"""scripts/deps.sh's package sets (issue 32 item 1): `make run` installs
what running needs and nothing of the tests or the bench; the test and
bench peers are never left enabled as system services."""
import os
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPS = ROOT / "scripts" / "deps.sh"

# the programs the tests and the bench start themselves on loopback
PEERS = {"v2ray", "trojan", "shadowsocks-libev", "nginx", "libnginx-mod-stream", "dante-server",
         "microsocks", "dnsmasq-base", "dnsmasq", "strace", "python3-pytest", "python3-grpcio",
         "python3-prometheus-client", "python3-websockets", "curl", "clang"}
BENCH_ONLY = {"nginx", "libnginx-mod-stream", "dante-server", "microsocks", "dnsmasq-base", "strace"}


def deps(*args, env=None):
    return subprocess.run(["bash", str(DEPS), *args], capture_output=True, text=True, timeout=120,
                          env=env)


def listed(name):
    r = deps("--list", name)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_i32_run_set_names_no_test_or_bench_peer():
    """Issue 32 item 1: `scripts/deps.sh --list run` is the build and the
    libraries: no peer; test adds the interop peers, bench the bench's."""
    run, test, bench = listed("run"), listed("test"), listed("bench")
    assert {"meson", "ninja-build", "libuv1-dev", "libssl-dev", "libnghttp2-dev"} <= set(run), run
    assert not PEERS & set(run), PEERS & set(run)
    assert set(run) < set(test) < set(bench)
    assert {"v2ray", "trojan", "shadowsocks-libev", "python3-pytest"} <= set(test)
    assert not BENCH_ONLY & set(test), BENCH_ONLY & set(test)
    assert BENCH_ONLY <= set(bench)
    assert deps("--list", "everything").returncode == 2


def test_i32_make_targets_call_their_set():
    """make run and make build install the run set, make test, test-asan and
    fuzz the test set, make bench the bench set."""
    want = {"run": "run", "build": "run", "test": "test", "test-asan": "test", "fuzz": "test",
            "bench": "bench"}
    for target, name in want.items():
        # an outer make's flags (make test runs the tests) are not this one's
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
        r = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True,
                           timeout=60, env=env)
        sets = re.findall(r"^scripts/deps\.sh (\w+)$", r.stdout, re.M)
        assert sets and sets[0] == name, (target, r.stdout)
        if name == "run":
            assert sets == ["run"], (target, sets)


def enabled_services():
    """The peer services systemd would start at boot (its own answer)."""
    names = deps("--services", "bench").stdout.split()
    assert {"nginx.service", "danted.service", "v2ray.service", "shadowsocks-libev.service",
            "trojan.service"} <= set(names), names
    # one unit a call: a unit not installed answers on stderr only
    return [n for n in names if subprocess.run(
        ["systemctl", "--root=/", "is-enabled", n], capture_output=True, text=True,
        timeout=60).stdout.strip() in ("enabled", "enabled-runtime")]


def test_i32_no_peer_service_is_enabled_after_deps():
    """Issue 32 item 1: after `scripts/deps.sh test`, with every package
    present (make test runs it before the tests), no peer's service is
    enabled at boot, also those an older deps.sh left enabled."""
    missing = [p for p in listed("test") if subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True).stdout
        != "install ok installed"]
    assert not missing, f"run `make deps-test` first: {missing} missing"
    env = dict(os.environ)
    env.pop("ETM_DEPS_KEEP_SERVICES", None)
    r = deps("test", env=env)
    assert r.returncode == 0, r.stderr
    assert enabled_services() == []
    # and a second run has nothing to do and says nothing
    r = deps("test", env=env)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


FAKE_DPKG = """#!/bin/sh
# every package present but the one the test installs
for p; do case "$p" in -*) ;; {pkg}) ;; *) echo "$p install ok installed";; esac; done
"""
FAKE_APT = """#!/bin/sh
# what invoke-rc.d would hear from policy-rc.d while this installs
[ "$1" = install ] || exit 0
"$ETM_DEPS_POLICY_RC_D" nginx start
echo "$*: policy-rc.d says $?" >> {log}
"""


def test_i32_install_forbids_starting_services(tmp_path):
    """Issue 32 item 1: while apt-get installs, policy-rc.d forbids every
    start (exit 101, invoke-rc.d's "action forbidden"); one deps.sh made is
    removed afterwards. apt-get and dpkg-query are stand-ins here."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt.log"
    (bin_dir / "dpkg-query").write_text(FAKE_DPKG.format(pkg="trojan"))
    (bin_dir / "apt-get").write_text(FAKE_APT.format(log=log))
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    policy = tmp_path / "policy-rc.d"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", ETM_DEPS_SUDO="",
               ETM_DEPS_POLICY_RC_D=str(policy), ETM_DEPS_KEEP_SERVICES="1")
    r = deps("test", env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "deps: installing trojan\n"
    assert log.read_text() == "install -y -qq --no-install-recommends trojan: policy-rc.d says 101\n"
    assert not policy.exists()
    # one that was there already stays, untouched
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    assert deps("test", env=env).returncode == 0
    assert policy.read_text() == "#!/bin/sh\nexit 101\n"
