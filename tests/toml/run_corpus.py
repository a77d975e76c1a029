#!/usr/bin/env python3
"""run_corpus.py - runs a toml-test decoder over the toml-test corpus sets.

Usage: run_corpus.py DECODER [NAME=DIR ...]

With no NAME=DIR the two known sets are looked for (SETS below): the one
Debian's golang-github-burntsushi-toml-dev ships (scripts/deps.sh installs
it) and ../shared/data/toml-test beside the checkout. Every set found is run
and counted on its own; a set not found is said so. Fails on any failure,
when a found set holds no case, when an exclusion matches no file, and when
no set is found at all.

In a set, every valid/**/X.toml must decode (exit 0, nothing on stderr) to
tagged JSON equal to X.json as a JSON value; every invalid/**/X.toml must be
refused with exit status 1 and a `line L, column C` message on stderr.
Files other than *.toml and their *.json are not cases (the Debian set's
invalid/*/*.multi are the sources its one-line invalid cases were split
from; every line of them is also there as its own .toml).
"""

import concurrent.futures
import json
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# The sets looked for when none is named, in the order they are reported.
# Each differs in toml-test version, hence counted apart.
SETS = [
    # golang-github-burntsushi-toml-dev 1.2.0-2 (Debian 12) vendors
    # toml-test's cases inside the Go module's source tree.
    ('debian', '/usr/share/gocode/src/github.com/BurntSushi/toml/'
               'internal/toml-test/tests'),
    # The TOML 1.0 cases kept beside this workspace's checkouts; a user's
    # clone has none.
    ('shared', os.path.join(HERE, '..', '..', '..', 'shared', 'data', 'toml-test')),
]

# Cases not run, per set, each with why. Only cases that test something
# outside TOML 1.0 (the version src/toml/ implements) or whose expected
# JSON is written in another format belong here; a case we fail against
# TOML 1.0 is a parser bug to fix, never an entry. Each entry must match a
# file in its set when the set is found, so a stale entry fails the run.
EXCLUDED = {
    'debian': {
        'valid/string/escape-esc.toml':
            'the \\e escape (U+001B) is TOML 1.1; TOML 1.0 section "String" '
            'lists \\b \\t \\n \\f \\r \\" \\\\ \\uXXXX \\UXXXXXXXX '
            'only, so our parser rightly refuses it (the package\'s own '
            'internal/toml-test/version.go excludes it for "1.0.0" too)',
    },
}
TIMEOUT = 10  # seconds per case; a decoder that hangs fails the case
ERROR_RE = re.compile(r'^toml-decode: line [1-9][0-9]*, column [1-9][0-9]*: \S')
SANITIZER_RE = re.compile(r'AddressSanitizer|LeakSanitizer|runtime error:')
DATETIME_RE = re.compile(
    r'^(?:(\d{4})-(\d{2})-(\d{2}))?[Tt ]?'
    r'(?:(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?)?'
    r'([Zz]|[+-]\d{2}:\d{2})?$')
DATETIME_TYPES = ('datetime', 'datetime-local', 'date-local', 'time-local')


def parse_float(s):
    s = s.strip().lower()
    if s.lstrip('+-') in ('inf', 'infinity', 'nan'):
        if s.lstrip('+-') == 'nan':
            return math.nan
        return -math.inf if s.startswith('-') else math.inf
    return float(s.replace('_', ''))


def norm_datetime(s):
    """A comparable tuple: 'z'/'Z'/'+00:00' and 'T'/'t'/' ' made equal,
    fractional seconds compared as a value (".5" == ".500")."""
    m = DATETIME_RE.match(s)
    if not m:
        return ('unparsed', s)
    y, mo, d, h, mi, sec, frac, off = m.groups()
    if frac is not None:
        frac = frac.rstrip('0')
    if off is not None:
        off = '+00:00' if off in ('Z', 'z', '-00:00') else off
    return (y, mo, d, h, mi, sec, frac or '', off)


def scalar_equal(want, got):
    t = want['type']
    if got.get('type') != t:
        return False
    wv, gv = want['value'], got['value']
    if not isinstance(gv, str):
        return False
    try:
        if t == 'integer':
            return int(wv) == int(gv)
        if t == 'float':
            a, b = parse_float(wv), parse_float(gv)
            return (math.isnan(a) and math.isnan(b)) or a == b
        if t in DATETIME_TYPES:
            return norm_datetime(wv) == norm_datetime(gv)
    except ValueError:
        return False
    return wv == gv


def is_scalar(x):
    return (isinstance(x, dict) and set(x) == {'type', 'value'}
            and isinstance(x.get('type'), str))


def diff(want, got, path='$'):
    """None when equal, else a line saying where they differ."""
    if is_scalar(want):
        if not is_scalar(got) or not scalar_equal(want, got):
            return f'{path}: want {json.dumps(want)}, got {json.dumps(got)}'
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict) or is_scalar(got):
            return f'{path}: want a table, got {json.dumps(got)[:200]}'
        if set(want) != set(got):
            return (f'{path}: keys differ: missing {sorted(set(want) - set(got))}, '
                    f'extra {sorted(set(got) - set(want))}')
        for k in want:
            d = diff(want[k], got[k], f'{path}.{k}')
            if d:
                return d
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(want) != len(got):
            return f'{path}: want an array of {len(want)}, got {json.dumps(got)[:200]}'
        for i, (a, b) in enumerate(zip(want, got)):
            d = diff(a, b, f'{path}[{i}]')
            if d:
                return d
        return None
    return f'{path}: unexpected expected-value {json.dumps(want)}'


def run(decoder, path):
    with open(path, 'rb') as f:
        data = f.read()
    try:
        p = subprocess.run([decoder], input=data, capture_output=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return None, b'', b'timeout'
    return p.returncode, p.stdout, p.stderr


def check_valid(decoder, toml_path):
    json_path = toml_path[:-len('.toml')] + '.json'
    if not os.path.exists(json_path):
        return f'no {os.path.basename(json_path)} beside it'
    rc, out, err = run(decoder, toml_path)
    if rc != 0:
        return f'exit {rc}: {err.decode(errors="replace").strip()}'
    if err:
        return f'wrote to stderr: {err.decode(errors="replace").strip()}'
    try:
        got = json.loads(out)
    except ValueError as e:
        return f'output is not JSON ({e}): {out[:200]!r}'
    with open(json_path, encoding='utf-8') as f:
        want = json.load(f)
    return diff(want, got)


def check_invalid(decoder, toml_path):
    rc, out, err = run(decoder, toml_path)
    text = err.decode(errors='replace').strip()
    if rc != 1:
        return f'exit {rc} (want 1): {text[:300]}'
    if SANITIZER_RE.search(text):
        return f'sanitizer report: {text[:300]}'
    if not ERROR_RE.match(text):
        return f'stderr does not name the line: {text[:300]!r}'
    return None


def collect(root, kind):
    base = os.path.join(root, kind)
    found = []
    for dirpath, _, files in os.walk(base):
        for name in files:
            if name.endswith('.toml'):
                found.append(os.path.join(dirpath, name))
    return sorted(found)


def run_set(decoder, name, corpus):
    """Runs one set; prints its failures, exclusions and counts. Returns the
    number of failures (a set without cases or with a stale exclusion counts
    as one)."""
    excluded = EXCLUDED.get(name, {})
    cases, skipped = [], []
    for kind in ('valid', 'invalid'):
        for path in collect(corpus, kind):
            rel = os.path.relpath(path, corpus)
            if rel in excluded:
                skipped.append(rel)
            else:
                cases.append((kind, path))
    failed = 0
    for rel, why in sorted(excluded.items()):
        if rel in skipped:
            print(f'{name}: EXCLUDED {rel}: {why}')
        else:
            print(f'{name}: FAIL stale exclusion {rel}: no such case in {corpus}')
            failed += 1
    if not cases:
        print(f'{name}: FAIL no cases found under {corpus}')
        return failed + 1
    check = {'valid': check_valid, 'invalid': check_invalid}
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        results = list(pool.map(lambda c: (c, check[c[0]](decoder, c[1])), cases))
    passed = {'valid': 0, 'invalid': 0}
    total = {'valid': 0, 'invalid': 0}
    for (kind, path), problem in results:
        total[kind] += 1
        if problem is None:
            passed[kind] += 1
        else:
            print(f'{name}: FAIL {os.path.relpath(path, corpus)}: {problem}')
    failed += sum(total.values()) - sum(passed.values())
    if total['valid'] == 0 or total['invalid'] == 0:
        print(f'{name}: FAIL no valid or no invalid cases under {corpus}')
        failed += 1
    print(f'{name} ({corpus}): '
          f'valid {passed["valid"]}/{total["valid"]} passed, '
          f'invalid {passed["invalid"]}/{total["invalid"]} refused as expected, '
          f'{len(skipped)} excluded, {failed} failure(s)')
    return failed


def main(argv):
    if len(argv) < 2 or argv[1].startswith('-'):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    decoder = os.path.abspath(argv[1])
    sets = []
    for arg in argv[2:]:
        name, sep, path = arg.partition('=')
        if not sep or not name or not path:
            print(f'run_corpus.py: want NAME=DIR, got {arg!r}', file=sys.stderr)
            return 2
        sets.append((name, path))
    sets = sets or SETS
    failed = found = 0
    for name, path in sets:
        corpus = os.path.abspath(path)
        if not os.path.isdir(corpus):
            print(f'{name}: not found at {corpus}')
            continue
        found += 1
        failed += run_set(decoder, name, corpus)
    if not found:
        # Never a skip: scripts/deps.sh installs the Debian set, so its
        # absence means the machine was not set up.
        print('FAIL: no toml-test set found (run scripts/deps.sh to install '
              'golang-github-burntsushi-toml-dev)')
        return 1
    print(f'{found} set(s) run, {failed} failure(s)')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
