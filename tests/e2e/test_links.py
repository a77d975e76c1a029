"""Share links of issue 32 (docs/links.md), through the binary.

D4: `link import` refuses, in --test's own words, the links whose block
--test would refuse (the adversarial review's five shapes: a gRPC service
name with a space or a '?', a 300-byte ALPN, a 300-byte host, a short 2022
key); main printed them and exited 0.

A multi-user Shadowsocks 2022 inbound (users behind an identity key,
SIP022-2): each user's exported link carries iPSK:uPSK, and the outbound
imported from it carries bytes through our own server as that user (main's
link had the user's key alone: the server answered nothing, "unknown
identity"). Also the links we cannot carry, refused by name, and v2rayN's
gRPC vmess link ("type":"gun") taken.

Only 127.0.0.1 is used; every process started here is stopped by its pid.
"""
import base64
import json
import os

import pytest

import test_interop as interop
from proxykit import LOOPBACK, socks5_connect, stop_cleanly

UUID = "b831381d-6324-4d53-ad4f-8cda48b30811"
A300 = "a" * 300

D4_LINKS = [
    (f"vless://{UUID}@h:443?type=grpc&serviceName=a%20b", 'grpc: bad service name "a b"'),
    (f"vless://{UUID}@h:443?type=grpc&serviceName=%3F", 'grpc: bad service name "?"'),
    (f"vless://{UUID}@h:443?security=tls&alpn={A300}", "outbound vless-h: tls: bad ALPN list"),
    # the tag quoted is cut at 63 bytes
    (f"vless://{UUID}@{A300}:443", f"outbound vless-{'a' * 57}: server is not a host name"),
    ("ss://2022-blake3-aes-128-gcm:c2hvcnQ%3D@h:1",
     "outbound shadowsocks-h: shadowsocks 2022 key must be base64 of 16 bytes"),
]


@pytest.mark.parametrize("link,line", D4_LINKS)
def test_d4_import_refuses_what_test_refuses(run, link, line):
    r = run("link", "import", link)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"etemenanki-app: bad link: {line}\n")


def test_d4_the_refusal_is_the_words_of_test(run, tmp_path):
    """The same outbound written by hand: --test says what the import said."""
    config = tmp_path / "c.toml"
    config.write_text('[[inbound]]\ntag = "in"\nprotocol = "socks"\nport = 1080\n\n'
                      '[[outbound]]\ntag = "vless-h"\nprotocol = "vless"\nserver = "h"\n'
                      f'port = 443\n[outbound.settings]\nid = "{UUID}"\n'
                      '[outbound.stream]\nsecurity = "tls"\n'
                      f'[outbound.stream.tls]\nalpn = ["{A300}"]\n')
    r = run("--test", "-c", str(config))
    assert (r.returncode, r.stderr) == (
        1, "configuration invalid: outbound vless-h: tls: bad ALPN list\n")


def vmess(body):
    return "vmess://" + base64.b64encode(json.dumps(body).encode()).decode()


UNSUPPORTED = [
    (f"vless://{UUID}@h:443?security=reality&pbk=x&flow=xtls-rprx-vision", "REALITY"),
    (f"vless://{UUID}@h:443?security=tls&flow=xtls-rprx-vision", "the XTLS Vision flow"),
    (f"vless://{UUID}@h:443?type=httpupgrade&path=%2F", "the httpupgrade transport"),
    (f"vless://{UUID}@h:443?type=xhttp&path=%2F", "the xhttp transport"),
    (f"vless://{UUID}@h:443?type=splithttp&path=%2F", "the splithttp transport (xhttp)"),
    ("ss://YWVzLTEyOC1nY206dGVzdA@h:1/?plugin=obfs-local%3Bobfs%3Dhttp", "a shadowsocks plugin"),
]


@pytest.mark.parametrize("link,feature", UNSUPPORTED)
def test_links_we_cannot_carry_name_the_feature(run, link, feature):
    r = run("link", "import", link)
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", f"etemenanki-app: bad link: {feature} is not supported\n")


def test_vmess_grpc_type_gun_is_taken(run):
    """v2rayN writes a gRPC vmess link with "type": "gun" (its mode)."""
    r = run("link", "import", vmess({"v": "2", "ps": "g", "add": "g.example.com", "port": "443",
                                     "id": UUID, "aid": "0", "net": "grpc", "type": "gun",
                                     "path": "svc", "tls": "tls"}))
    assert (r.returncode, r.stderr) == (0, "")
    assert 'network = "grpc"\n' in r.stdout
    assert '[outbound.stream.grpc]\nservice_name = "svc"\n' in r.stdout


@pytest.fixture
def chain(app, tmp_path):
    c = interop.Chain(app, tmp_path)
    yield c
    stop_cleanly(c.ours, "proxy")


def key(n):
    return base64.b64encode(os.urandom(n)).decode()


@pytest.mark.parametrize("method,n", [("2022-blake3-aes-128-gcm", 16),
                                      ("2022-blake3-aes-256-gcm", 32)])
def test_multi_user_2022_link_round_trip_carries_bytes(run, chain, echo, method, n):
    """Export a 2022 inbound with two users behind an identity key, import
    each user's link as a client's outbound, and carry bytes through our
    server as that user."""
    ipsk, users = key(n), [key(n), key(n)]
    text = ('[log]\naccess = "stderr"\n\n'
            '[[inbound]]\ntag = "ssm"\nprotocol = "shadowsocks"\nlisten = "127.0.0.1"\n'
            f'port = {{port0}}\n[inbound.settings]\nmethod = "{method}"\npassword = "{ipsk}"\n')
    for i, pw in enumerate(users):
        text += f'[[inbound.settings.users]]\nname = "u{i}"\npassword = "{pw}"\n'
    server = chain.proxy(text + "\n" + interop.FREEDOM)
    r = run("link", "export", "-c", str(server.cfg_path))
    assert (r.returncode, r.stderr) == (0, "")
    links = r.stdout.splitlines()
    quote = lambda k: k.replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
    assert links == [f"ss://{method}:{quote(ipsk)}%3A{quote(u)}@127.0.0.1:{server.port}#ssm-u{i}"
                     for i, u in enumerate(users)]
    for i, link in enumerate(links):
        r = run("link", "import", link)
        assert (r.returncode, r.stderr) == (0, "")
        assert f'password = "{ipsk}:{users[i]}"\n' in r.stdout
        block = r.stdout.replace("{", "{{").replace("}", "}}")
        client = chain.proxy(interop.our_socks_inbound() + block)
        if i == 0:
            interop.echo_check(client.port, echo.port, chain.logs, size=1 << 20)
        else:
            with socks5_connect(client.port, LOOPBACK, echo.port, timeout=5) as s:
                s.settimeout(5)
                s.sendall(b"second user")
                assert s.recv(64) == b"second user", chain.logs()
        interop.assert_logged(server, f"inbound ssm user u{i} rule", chain.logs)
