"""Keyed use from Python: holds and views (BufferError on release with a live view), blocks that stop
being valid, hints, evict, lookup, the counters, and the sources kept alive for the library."""
import gc
import sys
import weakref

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


def test_unprefetch(pipeline):
    pipeline.prefetch(20, expert(20))
    pipeline.unprefetch(20)           # dropped, or landed and first in line: never an error
    pipeline.unprefetch(12345)        # absent: nothing happens
    with pytest.raises(TypeError):
        pipeline.unprefetch("20")
    with pipeline.acquire(20, expert(20)) as b:
        np.testing.assert_array_equal(np.frombuffer(b, np.float32), expert(20))
        pipeline.unprefetch(20)       # held: nothing happens
    ks = pipeline.keyed_stats()
    assert ks["prefetches"] == 1 and ks["dropped"] + ks["wasted"] + ks["hits"] == 1


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


class Src(bytearray):
    """A source that can be watched: weakly referenced, and unresizable while the package pins it."""


def pinned(src):
    try:
        src.append(0)
    except BufferError:
        return True                   # its buffer is held
    src.pop()
    return False


@pytest.mark.parametrize("hints", [False, True])
def test_sources_of_dropped_keys_are_let_go(backend, tmp_path, hints):
    """Many distinct keys through few slots: the sources of keys the cache dropped long ago are let go
    (no evict, no run), so the pinned sources stay bounded by the slots, and a File whose keys are
    long gone closes."""
    slots, size = 4, 65536
    path = tmp_path / "w.bin"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, size=8 * size, dtype=np.uint8).tobytes())
    f = rf.File(path)
    p = rf.Pipeline(size, depth=slots, backend=backend)
    mv = memoryview(f)
    for k in range(8):                                      # the file's keys come first
        with p.acquire(k, mv[k * size:(k + 1) * size]) as b:
            assert b.nbytes == size
    del mv
    alive, watched = [], []
    for k in range(100, 4100):                              # 4,000 distinct 64 KiB keys
        src = Src(bytes([k % 251]) * size)
        alive.append(weakref.ref(src))
        if k % 97 == 0:
            watched.append(src)                             # a few the caller keeps
        if hints:
            p.prefetch(k + 1, Src(bytes([(k + 1) % 251]) * size))   # a hint, its own object
        with p.acquire(k, src) as b:
            assert bytes(memoryview(b)[:1]) == bytes([k % 251])
        del src
    gc.collect()
    bound = 2 * (2 * slots) + 16                            # a small multiple of the slots
    assert sum(r() is not None for r in alive) <= bound + len(watched)
    assert sum(map(pinned, watched)) <= bound
    assert not pinned(watched[0])                           # a key dropped long ago
    f.close()                                               # none of the file's keys is resident
    p.close()


def test_resident_keys_keep_their_sources(backend):
    """Letting go never touches a source a resident or incoming key may still be copied from."""
    with rf.Pipeline(256, depth=8, backend=backend) as p:
        keep = [Src(bytes([i]) * 256) for i in range(4)]
        for i, s in enumerate(keep):
            p.prefetch(i, s)
        for k in range(10, 400):                            # churn other keys through the other slots
            with p.acquire(k, Src(bytes([k % 256]) * 256)):
                pass
            if k % 3 == 0:
                for i, s in enumerate(keep):                # keys 0..3 stay the most recently used
                    with p.acquire(i, s) as b:
                        assert bytes(memoryview(b)) == bytes([i]) * 256
        assert [p.lookup(i)[0] for i in range(4)] == ["ready"] * 4
        assert all(pinned(s) for s in keep)
        assert p.keyed_stats()["bytes_copied"] == 256 * (4 + 390)   # keys 0..3 copied once each


def test_file_closes_once_its_keys_left_the_cache(backend, tmp_path):
    """A few file keys, then a few others that push them out: File.close() lets the pipelines drop the
    slices of absent keys at once (no need to wait for many more keyed calls)."""
    path = tmp_path / "w.bin"
    path.write_bytes(bytes(range(256)) * 64)
    f, g = rf.File(path), rf.File(path)
    with rf.Pipeline(4096, depth=4, backend=backend) as p, rf.Pipeline(4096, depth=2, backend=backend) as q:
        mv = memoryview(f)
        for k in range(3):
            with p.acquire(k, mv[k * 4096:(k + 1) * 4096]):
                pass
        q.prefetch(1, memoryview(g)[:4096])             # another pipeline, another file, resident
        del mv
        with pytest.raises(BufferError):
            f.close()                                    # keys 0..2 are resident
        for k in range(10, 14):
            with p.acquire(k, bytes([k]) * 4096):        # 4 slots: 0..2 leave
                pass
        assert [p.lookup(k)[0] for k in range(3)] == ["absent"] * 3
        f.close()
        assert f.closed
        with pytest.raises(BufferError):
            g.close()                                    # q's key is resident: its slice stays
        assert q.lookup(1)[0] in ("ready", "copying")
        q.evict(1)
        g.close()


class Owner(bytearray):
    """A source that owns a held block: letting go of the source drops the block's last reference."""


@pytest.mark.parametrize("how", ["evict", "sweep"])
def test_held_block_dropped_with_a_pinned_source_is_released(backend, how):
    """The pipeline lets go of a key's source (evict, or a sweep of the sources of keys that left the
    cache) while it is inside the pipeline on this thread: a held block freed then is released, as any
    held block dropped without release is, not left held for good."""
    with rf.Pipeline(4096, depth=3, backend=backend) as p:
        src = Owner(b"s" * 64)
        src.block = p.acquire(1, expert(1))
        gone = weakref.ref(src)
        p.prefetch(2, src)
        del src
        if how == "evict":
            p.evict(2)
        else:
            for k in range(3, 1000):                    # key 2 leaves the two free slots, is swept
                with p.acquire(k, bytes([k % 251]) * 64):
                    pass
                if gone() is None:
                    break
        assert gone() is None
        assert p.lookup(1)[0] == "ready"
        p.evict(1)                                      # rf.Busy while key 1 is still held
        assert p.lookup(1) == ("absent", None)
        p.run([expert(0)], lambda b: None)              # rf.Busy with a block held


def test_file_close_sweep_never_makes_another_thread_busy(backend, tmp_path):
    """File.close() sweeps the pins of every pipeline that no thread is inside, the GIL released while it
    evicts their absent keys: a keyed call on another thread meanwhile waits for the sweep, never gets
    rf.Busy (no call of the user's was inside the pipeline). Whether a sweep lands between the thread's
    calls is the scheduler's; the test passes either way unless one gives rf.Busy."""
    import threading
    import time

    path = tmp_path / "w.bin"
    path.write_bytes(bytes(64 * 4096))
    busy, stop = [], threading.Event()
    with rf.Pipeline(4096, depth=16, backend=backend) as p, rf.File(path) as f, rf.File(path) as g:
        src = memoryview(g)

        def serve():
            k = 0
            while not stop.is_set():
                k += 1
                try:
                    b = p.acquire(k, src[k % 64 * 4096:(k % 64 + 1) * 4096])   # keys leave: absent, pinned
                    p.release(b)
                except Exception as e:     # rf.Busy, or anything else: the thread's failure is the test's
                    busy.append(repr(e))
                    return
                sum(range(100))            # between calls, with the GIL: where a switch lets close() sweep
        t = threading.Thread(target=serve)
        mv = memoryview(f)                 # close() sweeps, then refuses (BufferError): f stays open
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)        # switch often: more sweeps land between the thread's calls
        t.start()
        try:
            end = time.monotonic() + 1.0
            while time.monotonic() < end and not busy:
                with pytest.raises(BufferError):
                    f.close()
        finally:
            sys.setswitchinterval(interval)
            stop.set()
            t.join()
        del mv, src
        p.close()                          # lets go of g's slices before g closes
    assert busy == []
