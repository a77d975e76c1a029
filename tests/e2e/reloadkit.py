"""Helpers for the hot-reload end-to-end tests (test_reload.py,
test_reload_load.py): configs built from TOML pieces, an editor-style save
and SIGHUP, and the log lines a reload ends with.

Standard library only. Everything binds 127.0.0.1.
"""
import os
import re
import signal
import time

# ---------------------------------------------------------------- configs


def socks_in(tag, port, *keys):
    """A socks [[inbound]] on 127.0.0.1; port is a number or "{portN}"."""
    text = (f'[[inbound]]\ntag = "{tag}"\nprotocol = "socks"\nlisten = "127.0.0.1"\n'
            f"port = {port}\n")
    return text + "".join(k + "\n" for k in keys) + "\n"


def outbound(tag, protocol, *keys):
    """An [[outbound]]; keys are TOML lines (`drain = "close"`)."""
    return (f'[[outbound]]\ntag = "{tag}"\nprotocol = "{protocol}"\n'
            + "".join(k + "\n" for k in keys) + "\n")


def config(*parts, default=None, level="debug"):
    """[log] level (in the file, so a reload reads the same level), the
    parts, then [route]."""
    text = f'[log]\nlevel = "{level}"\n\n' + "".join(parts)
    if default is not None:
        text += f'[route]\ndefault = "{default}"\n'
    return text


def render(proxy, template):
    """template with the proxy's {portN} filled in, as Proxy.start does."""
    fill = {f"port{i}": p for i, p in enumerate(proxy.ports)}
    fill.update(proxy.extra)
    return template.format(**fill)


# ---------------------------------------------------------------- reloading and its log lines

# What one reload ends with: applied, nothing to apply, or refused.
OUTCOME = re.compile(r"^\S+ [A-Z]+ +\S+: (config reload: .*"
                     r"|reload: (?:parse|build) failed, keeping current config: .*)$", re.M)
APPLIED = re.compile(r"^\S+ DEBUG \S+: (applied: \d+ built, \d+ reused, \d+ swapped, "
                     r"\d+ drained)$", re.M)


def lines(proxy, pattern):
    return pattern.findall(proxy.log())


def wait_lines(proxy, pattern, count, timeout=3.0):
    """The matches of pattern once there are count of them (or at timeout,
    or once the process has exited)."""
    deadline = time.monotonic() + timeout
    while True:
        exited = proxy.proc.poll() is not None
        found = lines(proxy, pattern)
        if len(found) >= count or exited or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def save(proxy, text):
    """An editor's save: a temporary file in the config's directory, then
    renamed over the config."""
    tmp = proxy.cfg_path.with_name(f".{proxy.cfg_path.name}.swp")
    tmp.write_text(text)
    os.replace(tmp, proxy.cfg_path)


def await_reload(proxy, trigger, timeout=3.0):
    """Runs trigger and returns (outcome line, applied line or None) of the
    reload it causes; the applied line is awaited only when the outcome is
    a change."""
    n_out, n_applied = len(lines(proxy, OUTCOME)), len(lines(proxy, APPLIED))
    trigger()
    found = wait_lines(proxy, OUTCOME, n_out + 1, timeout)
    assert len(found) > n_out, (f"no reload line within {timeout} s (exit status "
                                f"{proxy.proc.poll()}); log:\n{proxy.log()}")
    outcome = found[n_out]
    if not outcome.startswith("config reload: changed "):
        return outcome, None
    applied = wait_lines(proxy, APPLIED, n_applied + 1, timeout)
    assert len(applied) > n_applied, f"no applied: line; log:\n{proxy.log()}"
    return outcome, applied[-1]


def reload(proxy, template, timeout=3.0):
    """Saves the config (editor style, no signal); returns what
    await_reload returns."""
    return await_reload(proxy, lambda: save(proxy, render(proxy, template)), timeout)


def sighup(proxy, timeout=3.0):
    return await_reload(proxy, lambda: proxy.proc.send_signal(signal.SIGHUP), timeout)
