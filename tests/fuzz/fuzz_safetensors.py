#!/usr/bin/env python3
"""An atheris (libFuzzer for Python) target of ringfetch.safetensors' header parser: any bytes, as the
head of a file of any size, are either a well-formed header -- every tensor inside the file, none
overlapping -- or rf.InvalidArgument; never another exception, never a hang.

    pip install atheris
    cp -r tests/fuzz/corpus/safetensors /tmp/corpus   # a scratch copy: libFuzzer adds to it
    python3 tests/fuzz/fuzz_safetensors.py -runs=200000 -seed=1 -max_len=4096 /tmp/corpus

The suite runs a seeded, bounded fuzz of the same property without atheris
(tests/python/test_safetensors.py::test_fuzz_header_parser)."""
import struct
import sys

import atheris

with atheris.instrument_imports():
    import ringfetch as rf
    import ringfetch.safetensors as rst


def check(data):
    fdp = atheris.FuzzedDataProvider(data)
    extra = fdp.ConsumeIntInRange(0, 1 << 16)
    body = fdp.ConsumeBytes(fdp.remaining_bytes())
    # half the inputs get a header length that fits them, so the JSON checks are reached
    head = (struct.pack("<Q", len(body)) + body) if extra & 1 else body
    size = len(head) + extra
    try:
        start, tensors, meta = rst.parse_header(head, size, "fuzz")
    except rf.InvalidArgument:
        return
    assert isinstance(meta, dict) and 10 <= start <= size
    spans = sorted((off, off + nb) for _, _, off, nb in tensors.values() if nb)
    assert all(start <= a and b <= size for a, b in spans)
    assert all(b0 <= a1 for (_, b0), (a1, _) in zip(spans, spans[1:]))


if __name__ == "__main__":
    atheris.Setup(sys.argv, check)
    atheris.Fuzz()
