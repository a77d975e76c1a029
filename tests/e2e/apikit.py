"""The admin API's client for the end-to-end tests (test_api.py,
test_users.py, test_tracking.py): the port the log announces, REST calls
with urllib and the streams with python3-websockets.

Everything talks to 127.0.0.1.
"""
import json
import re
import time
import urllib.error
import urllib.request

import websockets

from proxykit import LOOPBACK

SERVING = re.compile(r"INFO +app: api: serving http://(?:127\.0\.0\.1|0\.0\.0\.0):(\d+)$", re.M)

# The [api] table a config appends; {api} is a port Proxy fills in
# (extra={"api": free_port()}).
API_TABLE = '\n[api]\nlisten = "127.0.0.1:{api}"\n'


class Api:
    """One etemenanki-app process with the API; its ports and a client."""

    def __init__(self, proxy, secret=None):
        self.proxy = proxy
        self.secret = secret
        deadline = time.monotonic() + 5
        while True:
            m = SERVING.search(proxy.log())
            if m or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        assert m, proxy.log()
        self.port = int(m.group(1))
        self.socks_port = proxy.port

    def url(self, path):
        return f"http://{LOOPBACK}:{self.port}{path}"

    def call(self, method, path, body=None, token="default", raw=None, headers=None):
        """(status, headers with lowercase names, parsed JSON or text or None)."""
        token = self.secret if token == "default" else token
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url(path), data=data, method=method)
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status, hdrs, payload = r.status, r.headers, r.read()
        except urllib.error.HTTPError as e:
            status, hdrs, payload = e.code, e.headers, e.read()
        hdrs = {k.lower(): v for k, v in hdrs.items()}
        if not payload:
            return status, hdrs, None
        if hdrs.get("content-type") == "application/json":
            return status, hdrs, json.loads(payload)
        return status, hdrs, payload.decode()

    def get(self, path, **kw):
        status, _, body = self.call("GET", path, **kw)
        assert status == 200, (path, status, body)
        return body

    def ws(self, path):
        sep = "&" if "?" in path else "?"
        q = f"{sep}token={self.secret}" if self.secret else ""
        return websockets.connect(f"ws://{LOOPBACK}:{self.port}{path}{q}", open_timeout=5,
                                  close_timeout=2)
