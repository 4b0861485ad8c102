"""Runs from Python: mixed sources, compute order and bytes, exceptions out of compute, blocks that
stop being valid, stats, cancel, the plan and the version."""
import os
import re

import numpy as np
import pytest

import ringfetch as rf


def test_version_and_plan():
    assert re.fullmatch(r"\d+\.\d+\.\d+", rf.__version__)
    steps = rf.plan_ring(4, 2)
    assert steps == [("prefetch", 0, 0), ("prefetch", 1, 1), ("await", 0, 0), ("compute", 0, 0),
                     ("prefetch", 2, 0), ("await", 1, 1), ("compute", 1, 1), ("prefetch", 3, 1),
                     ("await", 2, 0), ("compute", 2, 0), ("await", 3, 1), ("compute", 3, 1)]
    assert rf.plan_ring(0, 3) == []
    assert len(rf.plan_ring(100, 7)) == 300
    with pytest.raises(rf.InvalidArgument):
        rf.plan_ring(4, 0)
    with pytest.raises(TypeError):
        rf.plan_ring(4, "2")


def mixed_sources(n, size):
    """bytes, bytearray, numpy arrays (C and Fortran order), memoryview slices, and empty blocks; with
    the bytes each must deliver (its memory, in memory order)."""
    rng = np.random.default_rng(7)
    srcs, expect = [], []
    for i in range(n):
        raw = rng.integers(0, 256, size=(i * 37) % (size + 1), dtype=np.uint8).tobytes()
        kind = i % 6
        if kind == 0:
            src = raw
        elif kind == 1:
            src = bytearray(raw)
        elif kind == 2:
            src = np.frombuffer(raw, np.uint8).copy()
        elif kind == 3:
            big = np.frombuffer(bytes(7) + raw + bytes(5), np.uint8)
            src = memoryview(big)[7:7 + len(raw)]
        elif kind == 4 and len(raw) % 2 == 0 and raw:
            src = np.ndarray((len(raw) // 2, 2), np.uint8, buffer=bytearray(raw), order="F")
            assert src.flags.f_contiguous and not src.flags.c_contiguous
        else:
            src = memoryview(raw)
        srcs.append(src)
        expect.append(raw)
    return srcs, expect


@pytest.mark.parametrize("depth", [1, 2, 3, 8])
def test_mixed_sources(backend, depth):
    size = 4096
    srcs, expect = mixed_sources(60, size)
    with rf.Pipeline(size, depth=depth, backend=backend) as p:
        assert p.depth == depth and p.backend == backend and p.slot_bytes == size
        for _ in range(2):  # the pipeline is reusable
            seen = []

            def compute(b):
                assert b.slot == b.index % depth and b.stream is None
                assert b.nbytes == len(expect[b.index])
                assert bytes(memoryview(b)) == expect[b.index]
                view = np.frombuffer(b, np.uint8)
                assert not view.flags.writeable
                seen.append(b.index)

            p.run(srcs, compute)
            assert seen == list(range(len(srcs)))
        st = p.stats()
        assert st["blocks"] == len(srcs) and st["runs"] == 2
        assert st["bytes"] == sum(map(len, expect))


def test_numpy_compute_and_dlpack(backend):
    w = [np.full(1024, i, dtype=np.float32) for i in range(16)]
    total = []
    with rf.Pipeline(4096, depth=3, backend=backend) as p:
        def compute(b):
            a = np.frombuffer(b, np.float32)
            d = np.from_dlpack(b)
            assert d.dtype == np.uint8 and d.shape == (b.nbytes,) and not d.flags.writeable
            assert b.__dlpack_device__() == (1, 0)
            assert np.shares_memory(a, d) or a.ctypes.data == d.ctypes.data
            total.append(float(a.sum()))
        p.run(w, compute)
    assert total == [1024.0 * i for i in range(16)]


def test_empty_run_and_tuple_and_generator_sources(pipeline):
    pipeline.run([], lambda b: pytest.fail("no block"))
    got = []
    pipeline.run((b"ab", b"cd"), lambda b: got.append(bytes(memoryview(b))))
    assert got == [b"ab", b"cd"]
    with pytest.raises(TypeError):
        pipeline.run((x for x in [b"ab"]), lambda b: None)  # not a sequence


class Boom(Exception):
    pass


@pytest.mark.parametrize("at", [0, 3, 9])
def test_exception_in_compute(backend, at):
    srcs = [bytes([i]) * 100 for i in range(10)]
    calls = []
    err = Boom("block %d" % at)

    def compute(b):
        calls.append(b.index)
        if b.index == at:
            raise err

    with rf.Pipeline(4096, depth=3, backend=backend) as p:
        with pytest.raises(Boom) as ei:
            p.run(srcs, compute)
        assert ei.value is err           # the very exception, of its own type
        assert calls == list(range(at + 1))
        calls.clear()
        p.run(srcs, lambda b: calls.append(b.index))   # still usable
        assert calls == list(range(10))


def test_non_callable_return_values_ignored(pipeline):
    pipeline.run([b"x"] * 3, lambda b: 42)


def test_run_block_invalid_after_compute(pipeline):
    kept = []
    pipeline.run([b"abc", b"def"], kept.append)
    for b in kept:
        for use in (lambda: b.index, lambda: b.nbytes, lambda: memoryview(b), lambda: b.__dlpack__(),
                    lambda: np.frombuffer(b, np.uint8)):
            with pytest.raises(rf.InvalidArgument):
                use()
        assert "no longer valid" in repr(b)
        with pytest.raises(rf.InvalidArgument):
            pipeline.release(b)


def test_reentrant_calls_from_compute_are_busy(pipeline):
    seen = []

    def compute(b):
        for call in (lambda: pipeline.acquire(1, b"x"), lambda: pipeline.run([b"y"], lambda c: None),
                     pipeline.close, lambda: pipeline.evict(1)):
            with pytest.raises(rf.Busy):
                call()
        # any-thread calls work from a callback
        assert pipeline.lookup(1) == ("absent", None)
        pipeline.keyed_stats()
        seen.append(b.index)

    pipeline.run([b"a", b"b"], compute)
    assert seen == [0, 1]


def test_cancel_pending_stops_next_run(pipeline):
    pipeline.cancel()
    with pytest.raises(rf.Canceled):
        pipeline.run([b"a"], lambda b: pytest.fail("no compute after a pending cancel"))
    pipeline.run([b"a"], lambda b: None)


def test_cancel_clear(pipeline):
    """A cancel that came too late for the run it meant (it had ended) is withdrawn, so the next,
    unrelated run is not stopped by it."""
    pipeline.run([b"a"], lambda b: None)
    pipeline.cancel()                 # late: no run in progress, so it waits for the next
    pipeline.cancel_clear()
    got = []
    pipeline.run([b"a", b"b"], lambda b: got.append(b.index))
    assert got == [0, 1]
    pipeline.cancel_clear()           # nothing pending: nothing happens
    pipeline.run([b"a"], lambda b: None)
    pipeline.cancel()
    pipeline.cancel()                 # merged into one
    pipeline.cancel_clear()
    pipeline.run([b"a"], lambda b: None)


def test_cancel_clear_refused_during_a_run(pipeline):
    errors = []

    def compute(b):
        try:
            pipeline.cancel_clear()
        except rf.Busy as e:
            errors.append(str(e))

    pipeline.run([b"a", b"b"], compute)
    assert len(errors) == 2 and all("cancel_clear" in e for e in errors)
    pipeline.close()
    with pytest.raises(rf.InvalidArgument, match="closed"):
        pipeline.cancel_clear()


def test_cancel_from_compute(pipeline):
    seen = []

    def compute(b):
        seen.append(b.index)
        if b.index == 2:
            pipeline.cancel()

    with pytest.raises(rf.Canceled):
        pipeline.run([b"z"] * 10, compute)
    assert seen[:3] == [0, 1, 2] and len(seen) < 10


def test_stats_and_describe(pipeline):
    pipeline.collect_stats(True)
    pipeline.run([bytes(4096)] * 8, lambda b: None)
    st = pipeline.stats()
    assert st["timed"] and st["blocks"] == 8 and st["nqueues"] >= 1
    assert st["queue"][0]["computes"] == 8
    assert 0.0 <= st["overlap_efficiency"] <= 1.0
    assert pipeline.backend in pipeline.describe()


def test_depth_auto():
    with rf.Pipeline(4096, depth="auto", backend="threads") as p:
        assert p.depth >= 1
        p.run([bytes(4096)] * 16, lambda b: None)
        assert 1 <= p.depth <= 16


@pytest.mark.parametrize("backend", ["cpu", "threads"])
def test_stats_count_the_blocks_read_ahead(tmp_path, backend):
    # Blocks that follow one another in a file: on threads the caller reads them ahead of the slots in
    # large requests (docs/files.md, "Read ahead"), and stats() says how much; cpu reads each on its own,
    # and so does threads where io_uring is refused (preads through the page cache, on the copy lanes).
    path = tmp_path / "blocks.bin"
    path.write_bytes(os.urandom(64 * 65536))
    with rf.File(str(path)) as f, rf.Pipeline(65536, backend=backend) as p:
        view = memoryview(f)
        p.run([view[i * 65536:(i + 1) * 65536] for i in range(64)], lambda b: None)
        st = p.stats()
        if backend == "threads" and "files: pread (" not in p.describe():
            assert st["ahead_bytes"] > 0 and st["total_ahead_blocks"] == 64, p.describe()
        else:
            assert st["ahead_bytes"] == 0 and st["total_ahead_blocks"] == 0, p.describe()
        del view
