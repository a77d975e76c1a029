"""udplb_linklocal.py APP WORKDIR - run by test_udplb.py inside a network
namespace of its own (unshare -n), never on the host's: two links (a veth
pair, d0 and d1) each carry fe80::10 and fe80::20, so fe80::10 on d0 and
fe80::10 on d1 are two hosts with one address. A wildcard udp_lb listener
([::]) with max_flows_per_ip = 1 must take both as clients of their own and
answer each on its own link, from the address it sent to. Prints
"link-local ok" and exits 0, or fails with an assertion."""
import socket
import subprocess
import sys
import threading
from pathlib import Path

from udplbkit import LbApp, lb_config

app, workdir = sys.argv[1], Path(sys.argv[2])

for cmd in (["ip", "link", "set", "lo", "up"],
            ["ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1"],
            ["ip", "link", "set", "d0", "up"], ["ip", "link", "set", "d1", "up"]):
    subprocess.run(cmd, check=True)
for dev in ("d0", "d1"):
    for ip in ("fe80::10/64", "fe80::20/64"):
        subprocess.run(["ip", "-6", "addr", "add", ip, "dev", dev, "nodad"], check=True)

# the backend: an echo on [::1] that names itself "v6"
echo = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
echo.bind(("::1", 0))
stop = threading.Event()


def serve():
    echo.settimeout(0.05)
    while not stop.is_set():
        try:
            data, src = echo.recvfrom(2048)
        except (socket.timeout, OSError):
            continue
        echo.sendto(b"v6|" + data, src)


threading.Thread(target=serve, daemon=True).start()
proxy = LbApp(app, workdir, lb_config(["[::1]:%d" % echo.getsockname()[1]], workers=1,
                                      listen="::", cluster={"max_flows_per_ip": 1}), 1)
proxy.start()
try:
    for dev in ("d0", "d1"):
        idx = socket.if_nametoindex(dev)
        c = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        c.bind(("fe80::10", 0, 0, idx))
        c.settimeout(2.0)
        c.sendto(b"from " + dev.encode(), ("fe80::20", proxy.port, 0, idx))
        try:
            data, src = c.recvfrom(2048)
        except socket.timeout:
            raise AssertionError(f"no answer on {dev}; log:\n{proxy.log()}")
        assert data == b"v6|from " + dev.encode(), (dev, data)
        assert src == ("fe80::20", proxy.port, 0, idx), (dev, src)
    m = proxy.metrics()
    assert m["flows_created"] == 2 and m["active_flows"] == 2, m
    assert m["drops"]["shed_per_ip"] == 0 and m["drops"]["send_error"] == 0, m
finally:
    status = proxy.stop()
    stop.set()
assert status == 0, f"etemenanki-app did not stop cleanly ({status}); log:\n{proxy.log()}"
print("link-local ok")
