#!/usr/bin/env bash
# Installs every Debian package the build and the tests need; does nothing
# when they are all present already.
set -euo pipefail

packages=(
  build-essential meson ninja-build pkg-config clang libclang-rt-14-dev
  libcmocka-dev python3 python3-pytest curl
  libuv1-dev libssl-dev libc-ares-dev libpcre2-dev
  libprotobuf-c-dev protobuf-c-compiler libwslay-dev libnghttp2-dev
  # sd_notify and socket activation (optional to the build: meson -Dsystemd)
  libsystemd-dev
  # systemd-analyze, for the unit's test (tests/e2e/test_service.py)
  systemd
  openssl
  # the toml-test corpus for tests/toml (shipped inside the Go module source)
  golang-github-burntsushi-toml-dev
  # real peers for the interop tests
  v2ray trojan
  # the independent gRPC peer (python3-grpcio: its own HTTP/2 and gRPC stack)
  python3-grpcio
  # the Prometheus client's own text parser, for tests/e2e/test_metrics.py
  python3-prometheus-client
  # a WebSocket client for the admin API's streams (tests/e2e/test_api.py)
  python3-websockets
  # more peers for `make bench`
  nginx libnginx-mod-stream shadowsocks-libev dante-server microsocks strace
  # the DNS bench's upstream and reference cache: the dnsmasq binary alone
  # (the `dnsmasq` package adds a system service that would hold port 53)
  dnsmasq-base
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
# A fresh machine's package lists can be empty; update before installing.
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
