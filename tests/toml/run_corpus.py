#!/usr/bin/env python3
"""run_corpus.py - runs a toml-test decoder over the toml-test corpus.

Usage: run_corpus.py DECODER [CORPUS_DIR]

Every valid/**/X.toml must decode (exit 0, nothing on stderr) to tagged JSON
equal to X.json as a JSON value; every invalid/**/X.toml must be refused with
exit status 1 and a `line L, column C` message on stderr. Prints each failure
and a summary; exits 1 on any failure or if no case was found.
"""

import concurrent.futures
import json
import math
import os
import re
import subprocess
import sys

DEFAULT_CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              '..', '..', '..', 'shared', 'data', 'toml-test')
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


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    decoder = os.path.abspath(argv[1])
    corpus = os.path.abspath(argv[2] if len(argv) == 3 else DEFAULT_CORPUS)
    if not os.path.isdir(corpus):
        # The corpus is shared data beside the project (../shared), not part
        # of it: a user's clone has none. 77 is meson's "skipped", counted
        # as such, never as a pass.
        print(f'SKIP: no toml-test corpus at {corpus} (it is an extra beside the checkout)')
        return 77
    cases = [('valid', p) for p in collect(corpus, 'valid')]
    cases += [('invalid', p) for p in collect(corpus, 'invalid')]
    if not cases:
        print(f'FAIL: no cases found under {corpus}')
        return 1
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
            print(f'FAIL {os.path.relpath(path, corpus)}: {problem}')
    failed = sum(total.values()) - sum(passed.values())
    print(f'valid: {passed["valid"]}/{total["valid"]} passed, '
          f'invalid: {passed["invalid"]}/{total["invalid"]} refused as expected, '
          f'{failed} failure(s)')
    return 1 if failed or total['valid'] == 0 or total['invalid'] == 0 else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
