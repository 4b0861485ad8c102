"""rf.File: the buffer protocol over its mapping, slices of it as sources of runs and keyed calls,
closing rules, and the errors of opening."""
import os

import numpy as np
import pytest

import ringfetch as rf


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "w.bin"
    data = np.random.default_rng(3).integers(0, 256, size=64 * 4096 + 123, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    return path, data


@pytest.mark.parametrize("buffered", [False, True])
def test_file_sources_in_runs(backend, weights, buffered):
    path, data = weights
    with rf.File(path, buffered=buffered) as f:
        assert f.size == len(data)
        mv = memoryview(f)
        assert mv.readonly and mv.nbytes == len(data)
        # aligned blocks, unaligned ones, the tail, mixed with memory sources
        cuts = [(0, 4096), (4096, 8192), (100, 4000), (len(data) - 123, len(data)), (8192, 8192 + 4096)]
        srcs = [mv[a:b] for a, b in cuts] + [b"memory"]
        expect = [data[a:b] for a, b in cuts] + [b"memory"]
        got = []
        with rf.Pipeline(4096, depth=3, backend=backend) as p:
            p.run(srcs, lambda blk: got.append(bytes(memoryview(blk))))
            st = p.stats()
        assert got == expect
        assert st["file_bytes"] == sum(b - a for a, b in cuts)   # read from the file, not the mapping
        del srcs, mv


def test_file_sources_keyed(backend, weights):
    path, data = weights
    f = rf.File(path)
    p = rf.Pipeline(4096, depth=4, backend=backend)
    mv = memoryview(f)
    for step in range(3):
        for k in range(8):
            p.prefetch(k, mv[k * 4096:(k + 1) * 4096])
        for k in range(8):
            with p.acquire(k, mv[k * 4096:(k + 1) * 4096]) as b:
                assert bytes(memoryview(b)) == data[k * 4096:(k + 1) * 4096]
    del mv
    with pytest.raises(BufferError):
        f.close()                     # the pipeline keeps slices of the file as keyed sources
    p.close()
    f.close()
    assert f.closed
    with pytest.raises(rf.InvalidArgument):
        memoryview(f)
    f.close()


def test_source_past_end_of_file(weights):
    path, data = weights
    with rf.File(path) as f:
        mv = memoryview(f)
        assert len(mv[len(data) - 10:len(data) + 10]) == 10   # slicing clamps: never past the end
        del mv


def test_open_errors(tmp_path):
    with pytest.raises(rf.IOError):
        rf.File(tmp_path / "none")
    with pytest.raises(rf.NotSupported):
        rf.File(tmp_path)                                  # a directory
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(rf.NotSupported):
        rf.File(tmp_path / "empty")
    if os.path.exists("/dev/null"):
        with pytest.raises(rf.NotSupported):
            rf.File("/dev/null")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(rf.NotSupported):
        rf.File(fifo)                                      # never blocks on a FIFO
    with pytest.raises(TypeError):
        rf.File(3.5)
    with pytest.raises(TypeError):
        rf.File(tmp_path / "none", True)                   # buffered is keyword-only


def test_path_kinds(weights):
    path, data = weights
    for p in (str(path), bytes(path), path):
        with rf.File(p) as f:
            assert f.size == len(data)


def test_pread_reads_the_opened_file(weights, tmp_path):
    path, data = weights
    with rf.File(path) as f:
        assert f.pread(100, 4000) == data[4000:4100]
        assert f.pread(n=3, offset=len(data) - 3) == data[-3:]
        assert f.pread(0, len(data)) == b""
        with pytest.raises(rf.InvalidArgument, match="not inside"):
            f.pread(4, len(data) - 3)
        with pytest.raises(rf.InvalidArgument, match="not inside"):
            f.pread(2**62, 0)                              # refused before n bytes are allocated
        with pytest.raises(rf.InvalidArgument):
            f.pread(-1, 0)
        with pytest.raises(TypeError):
            f.pread(1.0, 0)
        # another file renamed over the path: still the opened file's bytes
        with open(path, "r+b") as w:
            other = tmp_path / "other.bin"
            other.write_bytes(bytes(len(data)))
            os.replace(other, path)
            assert f.pread(64, 0) == data[:64]
            w.truncate(1000)                               # the opened file shrinks
        with pytest.raises(rf.IOError, match="shrank"):
            f.pread(100, 990)
    with pytest.raises(rf.InvalidArgument, match="closed"):
        f.pread(1, 0)
