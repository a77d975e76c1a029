#!/usr/bin/env python3
"""The build's check of ARCHITECTURE.md's layout rules (section 5).

Two rules, checked over every file under src/ at each build:
  1. A folder is a layer: a file includes headers of its own layer or of a
     lower one, never of a higher one (the engine never includes app/).
  2. A source file holds at most 800 lines. Generated tables are not under
     src/ (meson writes them to the build folder), so they are not counted.

What breaks a rule today is listed below with the issue that removes it; a
listed file may shrink, never grow, and a new break fails the build.
Usage: layout_check.py SRC_DIR STAMP
"""
import pathlib
import re
import sys

# Lower number = lower layer. etemenanki/ is the public interface the
# supervisor implements and app/ uses.
RANK = {
    'base': 1, 'sansio': 1,
    'toml': 2, 'crypto': 2,
    'proto': 3,
    'transport': 4,
    'route': 5, 'runtime': 5,
    'outbound': 6, 'inbound': 6,
    'supervisor': 7, 'etemenanki': 7,
    'app': 9,
}
# udplb/ is two layers: its sans-io core (below proto: it knows no protocol)
# and its libuv shell, at the runtime's layer.
UDPLB_SHELL = {'shell.c', 'shell.h', 'shell_int.h', 'shell_rx.c', 'shell_tx.c',
               'shell_flows.c', 'sock.c', 'sock.h', 'group.c', 'health.c'}

# Upward includes that exist today, each to be removed by issue 33.
UPWARD_KNOWN = {
    ('runtime/mux_conn.c', 'outbound/fanout.h'),  # issue 33 point 1: carriers
}

LINES_MAX = 800
# Files over the bound today, each with its size as a ceiling (issue 33
# splits them): it may shrink, never grow.
LONG_KNOWN = {
    'app/api.c': 808,
    'app/api_http.c': 870,
    'app/link.c': 1075,
    'app/schema.c': 896,
    'runtime/dns.c': 848,
    'runtime/dns_service.c': 1626,
    'runtime/endpoint.c': 1040,
    'runtime/gun_conn.c': 1019,
    'runtime/mux_conn.c': 1186,
    'supervisor/spec.c': 1213,
    'transport/tls.c': 890,
}

INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"')


def rank_of(rel):
    folder, name = rel.split('/', 1) if '/' in rel else ('', rel)
    if folder == 'udplb':
        return RANK['runtime'] if name in UDPLB_SHELL else RANK['toml']
    return RANK.get(folder)


def check(src):
    faults = []
    for path in sorted(src.rglob('*.[ch]')):
        rel = path.relative_to(src).as_posix()
        lines = path.read_text(errors='replace').splitlines()
        mine = rank_of(rel)
        for number, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m or '/' not in m.group(1) or mine is None:
                continue
            theirs = rank_of(m.group(1))
            if theirs is not None and theirs > mine and (rel, m.group(1)) not in UPWARD_KNOWN:
                faults.append(f'src/{rel}:{number}: includes {m.group(1)}, a higher layer '
                              f'(ARCHITECTURE.md section 5: lower layers never include higher ones)')
        ceiling = LONG_KNOWN.get(rel, LINES_MAX)
        if len(lines) > ceiling:
            faults.append(f'src/{rel}: {len(lines)} lines, over {ceiling} '
                          f'(split it: a file holds at most {LINES_MAX} lines)')
    return faults


def main():
    src, stamp = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    faults = check(src)
    for fault in faults:
        print(f'layout-check: {fault}', file=sys.stderr)
    if faults:
        return 1
    stamp.write_text('')
    return 0


if __name__ == '__main__':
    sys.exit(main())
