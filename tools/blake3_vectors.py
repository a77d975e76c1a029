#!/usr/bin/python3
"""Writes tests/unit/blake3_vectors.h from the BLAKE3 team's official
test_vectors/test_vectors.json (github.com/BLAKE3-team/BLAKE3), so the
expected digests come from upstream, not from the C code they check.

    /usr/bin/python3 tools/blake3_vectors.py PATH/TO/test_vectors.json COMMIT \
        > tests/unit/blake3_vectors.h

COMMIT is the upstream commit the json was read at; it is only copied into
the header's comment, with the json's SHA-256, to say where the data is from.
"""

import hashlib
import json
import sys

# Output bytes of every case: the json's extended outputs.
EXTENDED_LEN = 131


def c_string(s):
    # Every string in the json is printable ASCII; anything else is refused
    # rather than escaped, so the header says exactly what the json says.
    if not all(0x20 <= ord(c) < 0x7F for c in s) or '"' in s or "\\" in s:
        raise SystemExit(f"not plain ASCII: {s!r}")
    return f'"{s}"'


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    path, commit = sys.argv[1], sys.argv[2]
    raw = open(path, "rb").read()
    data = json.loads(raw)
    if len(data["key"]) != 32:
        raise SystemExit("the key is not 32 bytes")
    out = [
        "/* blake3_vectors.h - the official BLAKE3 test vectors, written by "
        "/usr/bin/python3 tools/blake3_vectors.py from test_vectors/test_vectors.json "
        f"of github.com/BLAKE3-team/BLAKE3 at {commit} "
        f"(SHA-256 {hashlib.sha256(raw).hexdigest()}); do not edit. */",
        "#ifndef ETM_TESTS_BLAKE3_VECTORS_H",
        "#define ETM_TESTS_BLAKE3_VECTORS_H",
        "",
        "#include <stddef.h>",
        "",
        "/* The input of a case is input_len bytes, byte i being i % 251. */",
        f"#define BLAKE3_VECTOR_LEN {EXTENDED_LEN} /* bytes of each output */",
        f"#define BLAKE3_VECTOR_KEY {c_string(data['key'])}",
        f"#define BLAKE3_VECTOR_CONTEXT {c_string(data['context_string'])}",
        "",
        "static const struct blake3_vector {",
        "\tsize_t input_len;",
        "\tconst char *hash, *keyed_hash, *derive_key; /* hexadecimal */",
        "} BLAKE3_VECTORS[] = {",
    ]
    for case in data["cases"]:
        for mode in ("hash", "keyed_hash", "derive_key"):
            if len(case[mode]) != 2 * EXTENDED_LEN:
                raise SystemExit(f"case {case['input_len']}: {mode} is not {EXTENDED_LEN} bytes")
            bytes.fromhex(case[mode])
        out.append(f"\t{{{case['input_len']},")
        for mode in ("hash", "keyed_hash", "derive_key"):
            out.append(f'\t\t"{case[mode]}",')
        out[-1] = out[-1][:-1] + "},"
    out += ["};", "", "#endif"]
    print("\n".join(out))


main()
