"""tools/layout_check.py: the build's check of the layout rules fails on an
upward include and on a long file, and passes a tree that keeps them."""
import importlib.util
import pathlib
import subprocess
import sys

TOOL = pathlib.Path(__file__).resolve().parents[2] / 'tools' / 'layout_check.py'


def run(tree, tmp_path):
    stamp = tmp_path / 'stamp'
    out = subprocess.run([sys.executable, str(TOOL), str(tree), str(stamp)],
                         capture_output=True, text=True)
    return out.returncode, out.stderr, stamp.exists()


def write(tree, rel, text):
    path = tree / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_tree_that_keeps_the_rules_passes(tmp_path):
    tree = tmp_path / 'src'
    write(tree, 'runtime/conn.c', '#include "base/log.h"\n#include "proto/socks.h"\n')
    write(tree, 'app/cli.c', '#include "supervisor/plane.h"\n')
    assert run(tree, tmp_path) == (0, '', True)


def test_the_engine_including_app_fails(tmp_path):
    tree = tmp_path / 'src'
    write(tree, 'supervisor/plane.c', '\n#include "app/config.h"\n')
    rc, err, stamped = run(tree, tmp_path)
    assert (rc, stamped) == (1, False)
    assert err == ('layout-check: src/supervisor/plane.c:2: includes app/config.h, a higher layer '
                   '(ARCHITECTURE.md section 5: lower layers never include higher ones)\n')


def test_a_lower_layer_including_a_higher_one_fails(tmp_path):
    tree = tmp_path / 'src'
    write(tree, 'proto/mux.c', '#include "runtime/conn.h"\n')
    write(tree, 'udplb/flowtab.c', '#include "runtime/listener.h"\n')
    write(tree, 'udplb/shell.c', '#include "runtime/listener.h"\n')  # the shell may
    rc, err, _ = run(tree, tmp_path)
    assert rc == 1
    assert err.splitlines() == [
        'layout-check: src/proto/mux.c:1: includes runtime/conn.h, a higher layer '
        '(ARCHITECTURE.md section 5: lower layers never include higher ones)',
        'layout-check: src/udplb/flowtab.c:1: includes runtime/listener.h, a higher layer '
        '(ARCHITECTURE.md section 5: lower layers never include higher ones)',
    ]


def test_a_new_file_over_800_lines_fails_and_a_known_one_may_not_grow(tmp_path):
    spec = importlib.util.spec_from_file_location('layout_check', TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    known, ceiling = next(iter(tool.LONG_KNOWN.items()))
    tree = tmp_path / 'src'
    write(tree, 'proto/new.c', 'x\n' * 800)
    write(tree, known, 'x\n' * ceiling)
    assert run(tree, tmp_path)[0] == 0
    write(tree, 'proto/new.c', 'x\n' * 801)
    write(tree, known, 'x\n' * (ceiling + 1))
    rc, err, _ = run(tree, tmp_path)
    assert rc == 1
    assert sorted(err.splitlines()) == sorted([
        f'layout-check: src/{known}: {ceiling + 1} lines, over {ceiling} '
        '(split it: a file holds at most 800 lines)',
        'layout-check: src/proto/new.c: 801 lines, over 800 (split it: a file holds at most 800 lines)',
    ])


def test_the_tree_as_it_stands_passes(tmp_path):
    src = TOOL.parents[1] / 'src'
    rc, err, _ = run(src, tmp_path)
    assert (rc, err) == (0, '')
