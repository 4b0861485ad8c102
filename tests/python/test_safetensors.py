"""ringfetch.safetensors: the header read and checked without torch, tensors' bytes as file sources, and
hostile headers refused with rf.InvalidArgument naming the tensor (a seeded fuzz of the parser too)."""
import json
import os
import random
import struct

import numpy as np
import pytest

import ringfetch as rf
import ringfetch.safetensors as rst


def write(path, header, data=b"", raw=None):
    """A safetensors file from a header object (or raw header bytes), then the data."""
    head = raw if raw is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + data)
    return path


def test_reads_what_the_safetensors_package_wrote(tmp_path, backend):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(1)
    tensors = {
        "b.weight": rng.standard_normal((3, 5), dtype=np.float32),
        "a.bias": rng.standard_normal((7,), dtype=np.float32),
        "c.half": rng.standard_normal((2, 2, 3)).astype(np.float16),
        "d.empty": np.zeros((0, 4), dtype=np.float32),
        "e.int": rng.integers(-9, 9, size=(11,), dtype=np.int64),
    }
    path = tmp_path / "m.safetensors"
    save_file(tensors, str(path), metadata={"format": "np"})
    raw = path.read_bytes()
    with rst.open(path) as f:
        assert f.keys() == sorted(tensors)
        assert len(f) == 5 and "a.bias" in f and "nope" not in f
        assert f.metadata() == {"format": "np"}
        assert f.size == len(raw)
        names = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
        with rf.Pipeline(4096, depth=4, backend=backend) as p:
            for key, name in enumerate(f.keys()):
                dtype, shape, offset, nbytes = f.info(name)
                arr = tensors[name]
                assert shape == arr.shape and nbytes == arr.nbytes
                assert np.dtype(names[dtype]) == arr.dtype
                assert raw[offset:offset + nbytes] == arr.tobytes()      # the offset is absolute
                if nbytes == 0:
                    assert f.source(name).nbytes == 0
                    continue
                src = f.source(name)
                assert src.readonly and src.nbytes == nbytes
                with p.acquire(key, src) as b:
                    assert bytes(memoryview(b)) == arr.tobytes()
                with p.acquire(100 + key, f.source(name, 4, nbytes)) as b:
                    assert bytes(memoryview(b)) == arr.tobytes()[4:]
                del src
                p.evict(key)
                p.evict(100 + key)
            a = f.info("a.bias")[2]
            with p.acquire(500, f.file_source(a, 12)) as b:
                assert bytes(memoryview(b)) == raw[a:a + 12]
        with pytest.raises(KeyError, match="nope"):
            f.info("nope")
        with pytest.raises(rf.InvalidArgument):
            f.source("a.bias", 0, 10 ** 6)
        with pytest.raises(rf.InvalidArgument):
            f.file_source(len(raw) - 4, 8)
        with pytest.raises(TypeError):          # a wrong type is TypeError, as everywhere in the package
            f.source("a.bias", 0.0)
        with pytest.raises(TypeError):
            f.source("a.bias", 0, "8")
        with pytest.raises(TypeError):
            f.file_source(None, 8)
        assert f.source("a.bias", np.int64(4)).nbytes == f.info("a.bias")[3] - 4
    assert f.closed
    with pytest.raises(rf.InvalidArgument):
        f.source("a.bias")


def test_close_waits_for_its_sources(tmp_path):
    path = write(tmp_path / "x.safetensors", {"t": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}},
                 bytes(range(8)))
    f = rst.open(path)
    src = f.source("t")
    with pytest.raises(BufferError):
        f.close()                         # a source of it is alive: nothing changes
    assert not f.closed and bytes(src) == bytes(range(8))
    del src
    f.close()
    assert f.closed
    f.close()


GOOD = {"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
        "b": {"dtype": "BF16", "shape": [4], "data_offsets": [16, 24]},
        "__metadata__": {"format": "pt"}}


def mutate(header, name, **fields):
    h = json.loads(json.dumps(header))
    h[name].update(fields)
    return h


@pytest.mark.parametrize("header, raw, data, match", [
    (None, b"", b"", "too small"),
    (None, b"{}", b"", None),                                        # valid: no tensors
    (mutate(GOOD, "a", dtype="F33"), None, bytes(24), "'a': unknown dtype"),
    (mutate(GOOD, "a", dtype=7), None, bytes(24), "'a': unknown dtype"),
    (mutate(GOOD, "a", shape=[2, 3]), None, bytes(24), "'a': shape"),
    (mutate(GOOD, "a", shape=[-2, -2]), None, bytes(24), "'a': shape .* negative"),
    (mutate(GOOD, "a", shape=[2.0, 2]), None, bytes(24), "'a': shape .* integers"),
    (mutate(GOOD, "a", shape=[True, 4]), None, bytes(24), "'a': shape .* integers"),
    (mutate(GOOD, "a", shape="2x2"), None, bytes(24), "'a': shape"),
    (mutate(GOOD, "b", data_offsets=[16, 40]), None, bytes(24), "'b': data_offsets .* past the end"),
    (mutate(GOOD, "b", data_offsets=[8, 16]), None, bytes(24), "'b'.* overlaps tensor 'a'"),
    (mutate(GOOD, "b", data_offsets=[20, 16]), None, bytes(24), "'b': data_offsets .* not a range"),
    (mutate(GOOD, "b", data_offsets=[-8, 0]), None, bytes(24), "'b': data_offsets .* not a range"),
    (mutate(GOOD, "b", data_offsets=[16]), None, bytes(24), "'b': data_offsets .* pair"),
    (mutate(GOOD, "b", data_offsets=[16.0, 24]), None, bytes(24), "'b': data_offsets .* pair"),
    (mutate(GOOD, "b", data_offsets=["16", "24"]), None, bytes(24), "'b': data_offsets .* pair"),
    (mutate(GOOD, "b", data_offsets=None), None, bytes(24), "'b': data_offsets"),
    (dict(GOOD, c=[1, 2]), None, bytes(24), "'c': its entry is not a JSON object"),
    (dict(GOOD, __metadata__={"format": 1}), None, bytes(24), "__metadata__"),
    (dict(GOOD, __metadata__=[]), None, bytes(24), "__metadata__"),
    (None, b"[1, 2]", b"", "not a JSON object"),
    (None, b"{\"a\": ", b"", "not JSON"),
    (None, b"\xff\xfe{}", b"", "not JSON"),
    (None, b"[" * 100000 + b"]" * 100000, b"", "not JSON"),
    (None, b'{"t": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
           b'"t": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}', b"\0", "header names 't' twice"),
])
def test_hostile_headers(tmp_path, header, raw, data, match):
    path = tmp_path / "h.safetensors"
    if header is None and raw == b"":
        path.write_bytes(b"\x05\0\0")                                 # under 8 bytes
    else:
        write(path, header, data, raw)
    if match is None:
        with rst.open(path) as f:
            assert f.keys() == []
        return
    with pytest.raises(rf.InvalidArgument, match=match) as e:
        rst.open(path)
    assert str(path) in str(e.value)


def test_header_lengths(tmp_path):
    path = tmp_path / "h.safetensors"
    path.write_bytes(struct.pack("<Q", 1000) + b"{}")                 # past the file
    with pytest.raises(rf.InvalidArgument, match="header length 1000 runs past the file"):
        rst.open(path)
    path.write_bytes(struct.pack("<Q", 2 ** 63) + b"{}")              # absurd
    with pytest.raises(rf.InvalidArgument, match="absurd"):
        rst.open(path)
    path.write_bytes(struct.pack("<Q", 1) + b"{}")
    with pytest.raises(rf.InvalidArgument, match="header length 1 is too short"):
        rst.open(path)
    path.write_bytes(b"")
    with pytest.raises(rf.InvalidArgument, match="empty"):
        rst.open(path)
    # a truncated checkpoint: the header intact, the data short
    write(path, GOOD, bytes(20))
    with pytest.raises(rf.InvalidArgument, match="'b': data_offsets .* past the end .*truncated"):
        rst.open(path)
    with pytest.raises(FileNotFoundError):
        rst.open(tmp_path / "missing.safetensors")


def test_sub_byte_and_empty_tensors(tmp_path):
    header = {"f4": {"dtype": "F4", "shape": [2, 3], "data_offsets": [0, 3]},
              "z": {"dtype": "F32", "shape": [0, 7], "data_offsets": [3, 3]},
              "z2": {"dtype": "F32", "shape": [0], "data_offsets": [3, 3]}}
    with rst.open(write(tmp_path / "s.safetensors", header, bytes(3))) as f:
        assert f.info("f4")[3] == 3 and f.info("z")[3] == 0
    header["f4"]["shape"] = [1, 3]                                    # 12 bits: not whole bytes
    with pytest.raises(rf.InvalidArgument, match="'f4': shape"):
        rst.open(write(tmp_path / "s.safetensors", header, bytes(3)))


def _mutations(rng, text):
    """One random change to a header's JSON text: bytes flipped, cut or inserted, or a value replaced by
    something a hostile header might hold."""
    kind = rng.randrange(6)
    b = bytearray(text)
    if kind == 0 and b:
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == 1 and b:
        del b[rng.randrange(len(b)):][:rng.randrange(1, 16)]
    elif kind == 2:
        i = rng.randrange(len(b) + 1)
        b[i:i] = rng.choice([b"[", b"{", b"-", b"0", b"\"", b",", b"1e999", b"null", b"\xc3"])
    else:
        doc = json.loads(text)
        if not isinstance(doc, dict) or not doc:
            return bytes(b) + b" "
        name = rng.choice(sorted(doc))
        values = [-1, 0, 1, 2 ** 64, 2 ** 70, -(2 ** 63), 1.5, float("nan"), True, None, "F32", "I8", [], {},
                  [1], [0, 0], [0, 2 ** 64], [[0]], "x" * 50, [3, -1], [2 ** 31] * 4]
        if name == "__metadata__" or kind == 3 or not isinstance(doc[name], dict):
            doc[name] = rng.choice(values)
        else:
            entry = doc[name]
            field = rng.choice(["dtype", "shape", "data_offsets", "extra"])
            if rng.random() < 0.2:
                entry.pop(field, None)
            else:
                entry[field] = rng.choice(values + [rng.choice(sorted(rst.DTYPE_BITS))])
        b = bytearray(json.dumps(doc, allow_nan=True).encode())
    return bytes(b)


def test_fuzz_header_parser():
    """Seeded, bounded, deterministic: thousands of mutated headers, each parsed against a few file
    sizes; the parser either accepts (and then every tensor lies inside the file, none overlapping) or
    raises rf.InvalidArgument -- never another exception."""
    rng = random.Random(20261204)
    seeds = [GOOD, {"x.weight": {"dtype": "F16", "shape": [3, 5], "data_offsets": [0, 30]},
                    "y": {"dtype": "I64", "shape": [], "data_offsets": [30, 38]}}, {}]
    accepted = refused = 0
    for i in range(20000):
        text = json.dumps(rng.choice(seeds)).encode()
        for _ in range(rng.randrange(1, 4)):
            try:
                text = _mutations(rng, text)
            except (ValueError, TypeError):    # the text is no longer JSON: mutate bytes only from here
                break
        n = len(text) if rng.random() < 0.9 else rng.choice([0, 1, len(text) + 1, 2 ** 64 - 1, 2 ** 40])
        head = struct.pack("<Q", n % 2 ** 64) + text
        size = len(head) + rng.choice([0, 8, 24, 38, 64, 1000])
        try:
            start, tensors, meta = rst.parse_header(head, size, "fuzz")
        except rf.InvalidArgument as e:
            assert str(e).startswith("fuzz: ")
            refused += 1
            continue
        accepted += 1
        assert start == 8 + n and isinstance(meta, dict)
        spans = sorted((off, off + nb) for _, _, off, nb in tensors.values() if nb)
        assert all(start <= a and b <= size for a, b in spans)
        assert all(b0 <= a1 for (_, b0), (a1, _) in zip(spans, spans[1:]))
    assert accepted > 500 and refused > 5000      # both paths exercised


def test_header_is_the_opened_files_when_another_is_renamed_over_it(tmp_path, monkeypatch):
    """Another checkpoint renamed over the path right after the file is opened (a deploy swapping
    weights): the header read is the opened file's, so its offsets fit the bytes its sources read."""
    path = tmp_path / "m.safetensors"
    other = tmp_path / "other.safetensors"
    write(path, {"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}, b"AAAA")
    write(other, {"b": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                  "c": {"dtype": "U8", "shape": [6], "data_offsets": [2, 8]}}, b"BBCCCCCC")
    real = rst.File

    def open_then_swap(p, **kw):
        f = real(p, **kw)
        os.replace(other, path)       # between the open and the header's read
        return f

    monkeypatch.setattr(rst, "File", open_then_swap)
    with rst.open(path) as f:
        assert f.keys() == ["a"] and f.info("a") == ("U8", (4,), f.data_start, 4)
        assert bytes(f.source("a")) == b"AAAA"
