#!/usr/bin/env bash
# udplb_syscalls.sh - the system calls a new udp_lb flow costs etemenanki-app, counted
# with strace on a running app (one worker) while the load tool opens flows one at a time.
#
# Three phases, each traced on its own (strace -f -p attaches every thread of the app, after
# it started, so start-up calls are not counted):
#   open:  N flows, each a new client socket sending one datagram to a listener with no
#          responses cap (the flows stay open): what opening a flow costs, plus the
#          datagram and its answer;
#   dns:   N flows to a listener with responses = 1: the same plus closing the flow;
#   known: N datagrams, one at a time, on one flow that is already open;
#   reuse: N_REUSE flows to a listener with responses = 1 and reuse_upstream_sockets, 60 ms
#          apart (past the 50 ms a waiting socket must be quiet): after the first flow to each
#          of the three backends, a flow takes a waiting socket instead of opening one, and
#          gives it back without a close. The take makes no call of its own: the receive round
#          reads the flows' epoll set first (an epoll_wait, class datagram/loop, per round, not
#          per flow); a recvfrom MSG_PEEK (class "reuse") only when that read was cut short.
# The seed's count for opening a flow is four: socket, bind, connect, epoll_ctl(ADD).
#
# Usage: bench/udplb_syscalls.sh            (N=200, BUILD=build; KEEP_TRACES=dir keeps the
#        strace output and the app's log)
# Output: a table per phase and one line per phase starting "udplb_syscalls " (bench/run.py
# reads them). Only 127.0.0.1; only the processes this script started are signalled.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
APP=$BUILD/src/etemenanki-app
LOADGEN=$BUILD/bench/loadgen
N=${N:-200}
N_REUSE=${N_REUSE:-50}
STRACE=${STRACE:-strace}

for exe in "$APP" "$LOADGEN"; do
	[ -x "$exe" ] || { echo "udplb_syscalls: $exe is missing: build first" >&2; exit 2; }
done
command -v "$STRACE" >/dev/null || { echo "udplb_syscalls: strace is not installed (scripts/deps.sh)" >&2; exit 2; }

tmp=$(mktemp -d /tmp/etm-udplb-syscalls.XXXXXX)
serve_pid="" app_pid="" strace_pid=""
cleanup() {
	for p in $strace_pid $app_pid $serve_pid; do
		kill "$p" 2>/dev/null || true
	done
	for p in $strace_pid $app_pid $serve_pid; do
		wait "$p" 2>/dev/null || true
	done
	if [ -n "${KEEP_TRACES:-}" ]; then
		mkdir -p "$KEEP_TRACES" && cp "$tmp"/*.trace "$tmp/app.log" "$KEEP_TRACES"/ 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

# The backends: three UDP echoes in one process.
"$LOADGEN" serve --udp-echoes 3 >"$tmp/serve.out" </dev/null &
serve_pid=$!
for _ in $(seq 100); do
	grep -q udp_echoes= "$tmp/serve.out" 2>/dev/null && break
	sleep 0.05
done
echoes=$(sed -n 's/.*udp_echoes=\([0-9,]*\).*/\1/p' "$tmp/serve.out")
IFS=, read -r e1 e2 e3 <<<"$echoes"
[ -n "${e3:-}" ] || { echo "udplb_syscalls: loadgen serve did not start" >&2; exit 1; }
read -r keep dns reuse < <(python3 -c '
import socket
ss = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
ss.append(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')

cat >"$tmp/app.toml" <<EOF
[runtime]
workers = 1

[[inbound]]
tag = "keep"
protocol = "udp_lb"
listen = "127.0.0.1"
port = $keep
[inbound.settings]
cluster = "keep"

[[inbound]]
tag = "dns"
protocol = "udp_lb"
listen = "127.0.0.1"
port = $dns
[inbound.settings]
cluster = "dns"

[[inbound]]
tag = "reuse"
protocol = "udp_lb"
listen = "127.0.0.1"
port = $reuse
[inbound.settings]
cluster = "reuse"

[[cluster]]
tag = "reuse"
backends = ["127.0.0.1:$e1", "127.0.0.1:$e2", "127.0.0.1:$e3"]
selection = "round_robin"
idle_timeout = 120
responses = 1
reuse_upstream_sockets = true

[[cluster]]
tag = "keep"
backends = ["127.0.0.1:$e1", "127.0.0.1:$e2", "127.0.0.1:$e3"]
selection = "round_robin"
idle_timeout = 120

[[cluster]]
tag = "dns"
backends = ["127.0.0.1:$e1", "127.0.0.1:$e2", "127.0.0.1:$e3"]
selection = "round_robin"
idle_timeout = 120
responses = 1
EOF

"$APP" -c "$tmp/app.toml" </dev/null >"$tmp/app.log" 2>&1 &
app_pid=$!
for _ in $(seq 200); do
	[ "$(grep -c 'listening on' "$tmp/app.log" 2>/dev/null)" -ge 3 ] && break
	kill -0 "$app_pid" 2>/dev/null || break
	sleep 0.05
done
if [ "$(grep -c 'listening on' "$tmp/app.log" 2>/dev/null)" -lt 3 ]; then
	echo "udplb_syscalls: etemenanki-app did not start:" >&2
	tail -20 "$tmp/app.log" >&2
	exit 1
fi
sleep 0.5
echo "etemenanki-app pid $app_pid, $(ls /proc/$app_pid/task | wc -l) threads, workers = 1;" \
	"listeners keep=127.0.0.1:$keep (no responses cap) dns=127.0.0.1:$dns (responses = 1)" \
	"reuse=127.0.0.1:$reuse (responses = 1, reuse_upstream_sockets);" \
	"backends $e1 $e2 $e3; N=$N"

# created TAG: the flows_created counter of inbound TAG (SIGUSR1 prints it on the app's log).
created() {
	local before
	before=$(wc -l <"$tmp/app.log")
	kill -USR1 "$app_pid"
	sleep 0.3
	tail -n +"$((before + 1))" "$tmp/app.log" |
		sed -n "s/.*udp_lb $1: active_flows=[0-9]* flows_created=\([0-9]*\).*/\1/p" | tail -1
}

# phase NAME PORT TAG UNITS LOADGEN-ARGS...: traces the app while the load tool runs; TAG is
# the inbound behind PORT, whose flows_created tells how many flows the phase opened.
phase() {
	local name=$1 port=$2 tag=$3 units=$4
	shift 4
	local c0
	c0=$(created "$tag")
	"$STRACE" -f -qq -p "$app_pid" -o "$tmp/$name.trace" 2>"$tmp/$name.strace.err" &
	strace_pid=$!
	sleep 1 # attached to every thread by then
	"$LOADGEN" lb --label "syscalls-$name" --target "127.0.0.1:$port" --timeout 30 "$@" \
		>"$tmp/$name.loadgen"
	sleep 0.3
	kill -INT "$strace_pid"
	wait "$strace_pid" 2>/dev/null || true
	strace_pid=""
	local c1 flows
	c1=$(created "$tag")
	flows=$(( ${c1:-0} - ${c0:-0} ))
	echo
	echo "\$ loadgen lb --target 127.0.0.1:$port $*"
	grep '^loadgen ' "$tmp/$name.loadgen" || cat "$tmp/$name.loadgen"
	if ! grep -q ' answered=[1-9]' "$tmp/$name.loadgen"; then
		echo "udplb_syscalls: no datagram came back through the balancer; its log:" >&2
		tail -20 "$tmp/app.log" >&2
		exit 1
	fi
	echo "flows opened (flows_created of $tag before and after): $flows"
	python3 - "$tmp/$name.trace" "$name" "$units" "$flows" <<'PY'
import re, sys
path, name, units, flows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
OPEN = {"socket", "bind", "connect", "setsockopt", "getsockopt", "fcntl", "ioctl",
        "getsockname", "getpeername", "epoll_ctl(ADD)"}
CLOSE = {"close", "epoll_ctl(DEL)", "shutdown"}
REUSE = {"recvfrom(MSG_PEEK)"}
counts = {}
call = re.compile(r"^\d+\s+(?:\d+:\d+:\d+(?:\.\d+)?\s+)?([a-z_0-9]+)\((.*)")
for line in open(path, errors="replace"):
    m = call.match(line)
    if not m:
        continue  # "<... resumed>", signals, exits
    sc, rest = m.group(1), m.group(2)
    if sc == "epoll_ctl":
        op = re.search(r"EPOLL_CTL_(ADD|DEL|MOD)", rest)
        sc = f"epoll_ctl({op.group(1) if op else '?'})"
    if sc == "recvfrom" and "MSG_PEEK" in rest:
        sc = "recvfrom(MSG_PEEK)"
    counts[sc] = counts.get(sc, 0) + 1
print(f"{'syscall':<22} {'calls':>7} {'per datagram':>14}  class")
def cls(sc):
    return ("open" if sc in OPEN else "close" if sc in CLOSE else "reuse" if sc in REUSE
            else "datagram/loop")
for sc, c in sorted(counts.items(), key=lambda kv: (cls(kv[0]), -kv[1], kv[0])):
    print(f"{sc:<22} {c:>7} {c / units:>14.2f}  {cls(sc)}")
opened = {sc: c for sc, c in counts.items() if sc in OPEN}
closed = {sc: c for sc, c in counts.items() if sc in CLOSE}
reused = {sc: c for sc, c in counts.items() if sc in REUSE}
total = sum(counts.values())
# Opening and closing calls per flow the app opened (a new client socket that the kernel
# gave the port of an earlier one, still open, is a known flow); the rest per datagram.
per = max(flows, 1)
fmt = lambda d: ",".join(f"{k}:{v / per:.2f}" for k, v in sorted(d.items())) or "none"
print(f"udplb_syscalls phase={name} datagrams={units} flows_opened={flows} "
      f"total_per_datagram={total / units:.2f} "
      f"open_calls_per_flow={sum(opened.values()) / per:.2f} open_detail={fmt(opened)} "
      f"close_calls_per_flow={sum(closed.values()) / per:.2f} close_detail={fmt(closed)} "
      f"reuse_calls_per_flow={sum(reused.values()) / per:.2f} reuse_detail={fmt(reused)}")
PY
}

phase open "$keep" keep "$N" --count "$N" --flows 1 --per-flow 1 --window 1
phase dns "$dns" dns "$N" --count "$N" --flows 1 --per-flow 1 --window 1
phase known "$keep" keep "$N" --count "$N" --flows 1 --per-flow 0 --window 1
phase reuse "$reuse" reuse "$N_REUSE" --count "$N_REUSE" --flows 1 --per-flow 1 --window 1 \
	--gap-ms 60

# The app's own counters (SIGUSR1), to check that the flows were what the phases say.
before=$(wc -l <"$tmp/app.log")
kill -USR1 "$app_pid"
sleep 0.5
echo
echo "SIGUSR1:"
tail -n +"$((before + 1))" "$tmp/app.log" | grep 'udp_lb ' | sed 's/.*\(udp_lb \)/\1/' || echo "(no udp_lb lines)"
