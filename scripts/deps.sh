#!/usr/bin/env bash
# Installs the Debian packages of one set; does nothing when they are all
# present already (docs/development.md):
#
#   scripts/deps.sh [run]     build and run: the compiler, Meson, the libraries
#   scripts/deps.sh test      run + the test tools and the interop peers
#   scripts/deps.sh bench     test + the bench's peers
#   scripts/deps.sh --list SET      prints the set's packages, one a line
#   scripts/deps.sh --services SET  prints the peers' system services
#
# The peers are programs the tests and the bench start themselves on
# loopback, never system services: packages are installed with a
# policy-rc.d that forbids starting any, and then every peer service that
# is enabled at boot is disabled (also one an older deps.sh left enabled).
# ETM_DEPS_KEEP_SERVICES=1 leaves them as they are.
set -euo pipefail

# What `make build` and `make run` need. Meson's setup also registers the
# unit tests (cmocka) and the e2e tests (/usr/bin/python3), so those two
# are needed to build at all.
run_packages=(
  build-essential meson ninja-build pkg-config python3 libcmocka-dev
  libuv1-dev libssl-dev libc-ares-dev libpcre2-dev
  libprotobuf-c-dev protobuf-c-compiler libwslay-dev libnghttp2-dev
  # sd_notify and socket activation (optional to the build: meson -Dsystemd)
  libsystemd-dev
)

# What `make test`, `make test-asan` and `make fuzz` add.
test_packages=(
  # the fuzz build (make fuzz) and ASan's runtime for it
  clang libclang-rt-14-dev
  python3-pytest curl openssl
  # systemd-analyze, for the unit's test (tests/e2e/test_service.py)
  systemd
  # the toml-test corpus for tests/toml (shipped inside the Go module source)
  golang-github-burntsushi-toml-dev
  # real peers for the interop tests (ss-server, ss-local: test_shadowsocks.py)
  v2ray trojan shadowsocks-libev
  # the independent gRPC peer (python3-grpcio: its own HTTP/2 and gRPC stack)
  python3-grpcio
  # the Prometheus client's own text parser, for tests/e2e/test_metrics.py
  python3-prometheus-client
  # a WebSocket client for the admin API's streams (tests/e2e/test_api.py)
  python3-websockets
)

# What `make bench` adds.
bench_packages=(
  nginx libnginx-mod-stream dante-server microsocks strace
  # the DNS bench's upstream and reference cache: the dnsmasq binary alone
  # (the `dnsmasq` package adds a system service that would hold port 53)
  dnsmasq-base
)

# The system services the peers' packages enable at install. `test`
# disables the bench's too: an older deps.sh installed them for every set.
peer_services=(v2ray.service trojan.service shadowsocks-libev.service nginx.service
  danted.service)

usage() {
  echo "usage: scripts/deps.sh [--list|--services] [run|test|bench]" >&2
  exit 2
}

mode=install
case "${1:-}" in
  --list) mode=list; shift ;;
  --services) mode=services; shift ;;
  -*) usage ;;
esac
set_name=${1:-run}
[ $# -le 1 ] || usage

packages=("${run_packages[@]}")
services=()
case "$set_name" in
  run) ;;
  test)
    packages+=("${test_packages[@]}")
    services+=("${peer_services[@]}") ;;
  bench)
    packages+=("${test_packages[@]}" "${bench_packages[@]}")
    services+=("${peer_services[@]}") ;;
  *) usage ;;
esac

if [ "$mode" = list ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi
if [ "$mode" = services ]; then
  [ ${#services[@]} -eq 0 ] || printf '%s\n' "${services[@]}"
  exit 0
fi

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
sudo=${ETM_DEPS_SUDO-$sudo} # tests/e2e/test_deps.py runs it with its own

# One dpkg-query for the whole set: what is installed, the rest is missing.
declare -A installed=()
while read -r name status; do
  [ "$status" = "install ok installed" ] && installed[$name]=1
done < <(dpkg-query -W -f='${Package} ${Status}\n' "${packages[@]}" 2>/dev/null || true)
missing=()
for p in "${packages[@]}"; do
  [ -n "${installed[$p]:-}" ] || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  # invoke-rc.d asks /usr/sbin/policy-rc.d before it starts a service: 101
  # is "action forbidden", so no peer starts (and holds its port) while it
  # installs. Only a policy-rc.d made here is removed again.
  policy=${ETM_DEPS_POLICY_RC_D:-/usr/sbin/policy-rc.d} # a test names another
  made_policy=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# scripts/deps.sh: no service starts while it installs\nexit 101\n' |
      $sudo tee "$policy" >/dev/null
    $sudo chmod 0755 "$policy"
    made_policy=1
    trap '$sudo rm -f "$policy"' EXIT
  fi
  export DEBIAN_FRONTEND=noninteractive
  # A fresh machine's package lists can be empty; update before installing.
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  if [ -n "$made_policy" ]; then
    $sudo rm -f "$policy"
    trap - EXIT
  fi
fi

# The peers run only when a test or the bench starts them: none stays
# enabled at boot. Cheap when none is: one look at each unit's wants
# symlinks. systemctl --root works without a running systemd (containers,
# chroots); it changes the symlinks only and stops nothing that runs.
[ "${ETM_DEPS_KEEP_SERVICES:-}" = 1 ] && exit 0
enabled=()
for s in "${services[@]}"; do
  for link in /etc/systemd/system/*.wants/"$s"; do
    if [ -L "$link" ]; then
      enabled+=("$s")
      break
    fi
  done
done
[ ${#enabled[@]} -eq 0 ] && exit 0
echo "deps: disabling ${enabled[*]} (test and bench peers run only when a test starts them;" \
  "ETM_DEPS_KEEP_SERVICES=1 keeps them)" >&2
$sudo systemctl --root=/ --quiet disable "${enabled[@]}"
