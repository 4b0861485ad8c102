"""Keyed use from Python: holds and views (BufferError on release with a live view), blocks that stop
being valid, hints, evict, lookup, the counters, and the sources kept alive for the library."""
import numpy as np
import pytest

import ringfetch as rf


def expert(i, n=4096):
    return np.arange(n // 4, dtype=np.float32) + i


def test_acquire_release(pipeline):
    w = expert(3)
    b = pipeline.acquire(3, w)
    assert b.index == 3 and b.nbytes == w.nbytes and b.stream is None and 0 <= b.slot < 4
    a = np.frombuffer(b, np.float32)
    np.testing.assert_array_equal(a, w)
    assert not a.flags.writeable
    with pytest.raises(BufferError):
        pipeline.release(b)           # a live view: refused, the hold is kept
    assert pipeline.lookup(3) == ("ready", b.slot)
    np.testing.assert_array_equal(a, w)
    del a
    pipeline.release(b)
    with pytest.raises(rf.InvalidArgument):
        pipeline.release(b)           # released twice
    with pytest.raises(rf.InvalidArgument):
        b.slot
    with pytest.raises(rf.InvalidArgument):
        memoryview(b)
    # resident: acquiring again is a hit
    b2 = pipeline.acquire(3, w)
    pipeline.release(b2)
    ks = pipeline.keyed_stats()
    assert ks["acquires"] == 2 and ks["hits"] == 1 and ks["bytes_copied"] == w.nbytes
    assert set(ks) == {"acquires", "hits", "late", "prefetches", "dropped", "wasted", "bytes_copied"}


def test_memoryview_and_dlpack_views_hold(pipeline):
    b = pipeline.acquire(1, b"q" * 100)
    m = memoryview(b)
    assert m.readonly and m.nbytes == 100
    with pytest.raises(TypeError):
        m[0] = 1
    d = np.from_dlpack(b)
    m.release()
    with pytest.raises(BufferError):
        pipeline.release(b)           # the DLPack tensor is a view too
    with pytest.raises(BufferError):
        pipeline.close()              # and keeps the pipeline open
    assert bytes(d[:3]) == b"qqq"
    del d
    pipeline.release(b)


def test_context_manager(pipeline):
    with pipeline.acquire(9, b"abc") as b:
        assert bytes(memoryview(b)) == b"abc"
    with pytest.raises(rf.InvalidArgument):
        b.index
    with pytest.raises(BufferError):
        with pipeline.acquire(9, b"abc") as b:
            v = np.frombuffer(b, np.uint8)   # still alive when the with block ends
    assert pipeline.lookup(9)[0] == "ready"
    del v
    pipeline.release(b)


def test_hold_twice_and_nospace(pipeline):
    blocks = [pipeline.acquire(k, expert(k)) for k in range(4)]
    again = pipeline.acquire(2, expert(2))          # a held key: same slot, held twice
    assert again.slot == blocks[2].slot
    with pytest.raises(rf.NoSpace):
        pipeline.acquire(99, expert(99))
    with pytest.raises(rf.NoSpace):
        pipeline.prefetch(99, expert(99))
    with pytest.raises(rf.Busy):
        pipeline.evict(2)
    with pytest.raises(rf.Busy):
        pipeline.run([b"x"], lambda b: None)       # a run with a block held
    for b in blocks + [again]:
        pipeline.release(b)
    pipeline.evict(2)
    assert pipeline.lookup(2) == ("absent", None)


def test_prefetch_then_acquire(pipeline):
    for k in range(3):
        pipeline.prefetch(k, expert(k))
    for k in range(3):
        with pipeline.acquire(k, expert(k)) as b:
            np.testing.assert_array_equal(np.frombuffer(b, np.float32), expert(k))
    ks = pipeline.keyed_stats()
    assert ks["prefetches"] == 3 and ks["acquires"] == 3
    assert ks["hits"] + ks["dropped"] == 3


def test_lru_many_keys(pipeline):
    # More keys than slots, in a repeating pattern: bytes always right.
    for step in range(200):
        k = (step * 7) % 11
        with pipeline.acquire(k, expert(k)) as b:
            assert np.frombuffer(b, np.float32)[0] == k


def test_sources_kept_alive_until_evict(pipeline):
    src = bytearray(b"k" * 64)
    pipeline.prefetch(5, src)
    with pytest.raises(BufferError):
        src.extend(b"more")           # the pipeline holds its buffer: no resize under a copy
    pipeline.evict(5)
    src.extend(b"more")               # let go at evict
    src2 = bytearray(b"r" * 64)
    with pipeline.acquire(6, src2):
        pass
    pipeline.run([b"x"], lambda b: None)   # a run empties the cache: its sources are let go
    src2.extend(b"x")


def test_changed_source_after_evict(pipeline):
    a = bytearray(b"A" * 32)
    with pipeline.acquire(1, a) as b:
        assert bytes(memoryview(b)) == b"A" * 32
    pipeline.evict(1)
    a[:] = b"B" * 32
    with pipeline.acquire(1, a) as b:
        assert bytes(memoryview(b)) == b"B" * 32


def test_new_source_object_same_key(pipeline):
    # A fresh object for the same bytes each step (as memoryview slices made per step are): one copy.
    data = bytes(range(200))
    for _ in range(5):
        with pipeline.acquire(4, memoryview(data)[10:110]) as b:
            assert bytes(memoryview(b)) == data[10:110]
    assert pipeline.keyed_stats()["bytes_copied"] == 100


def test_release_of_other_pipelines_block(backend):
    with rf.Pipeline(4096, depth=2, backend=backend) as p, rf.Pipeline(4096, depth=2, backend=backend) as q:
        b = p.acquire(1, b"x")
        with pytest.raises(rf.InvalidArgument):
            q.release(b)
        p.release(b)


def test_close_with_holds_drops_them(backend):
    p = rf.Pipeline(4096, depth=2, backend=backend)
    b = p.acquire(1, b"x")
    p.close()                          # destroy drops the holds
    with pytest.raises(rf.InvalidArgument):
        b.index
    del b


def test_numpy_integer_keys(pipeline):
    k = np.int64(7)
    with pipeline.acquire(k, b"seven") as b:
        assert b.index == 7
    assert pipeline.lookup(np.uint32(7))[0] == "ready"
    pipeline.prefetch(np.int32(8), b"eight")
    pipeline.evict(np.int64(8))
    assert pipeline.lookup(8) == ("absent", None)
