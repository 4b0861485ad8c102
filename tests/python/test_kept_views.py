"""A view of a run's block kept after its compute returns: the run stops with BufferError, the view keeps
reading its own block's bytes (never a later block's), and nothing refills a slot until it is dropped —
for every kind of view: memoryview, numpy.frombuffer, DLPack (numpy, torch, a capsule never consumed),
Block.view and what is taken from it."""
import gc

import numpy as np
import pytest

import ringfetch as rf

NBLOCKS = 8
SIZE = 4096


def sources():
    return [bytes([i + 1]) * SIZE for i in range(NBLOCKS)]


def torch_or_skip():
    return pytest.importorskip("torch")


# each takes a Block and returns a view of its bytes (an object that reads the slot) and a function
# reading that view's bytes back
def memview(b):
    m = memoryview(b)
    return m, lambda: bytes(m)


def frombuffer(b):
    a = np.frombuffer(b, np.uint8)
    return a, a.tobytes


def np_dlpack(b):
    a = np.from_dlpack(b)
    return a, a.tobytes


def torch_dlpack(b):
    t = torch_or_skip().from_dlpack(b)
    return t, lambda: t.numpy().tobytes()


def capsule(b):
    cap = b.__dlpack__()          # never consumed: its destructor is what ends it
    return cap, None


def view_object(b):
    return b.view("U8", (SIZE,)), None   # the View alone (it makes no buffer once its block is done)


def view_numpy(b):
    a = np.asarray(b.view("F32", (SIZE // 4,)))   # the View itself is dropped: the array keeps it
    return a, lambda: a.tobytes()


def view_torch(b):
    t = torch_or_skip().from_dlpack(b.view("I16", (SIZE // 2,)))
    return t, lambda: t.numpy().tobytes()


KINDS = [memview, frombuffer, np_dlpack, torch_dlpack, capsule, view_object, view_numpy, view_torch]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_kept_view_stops_the_run(backend, kind, depth):
    srcs = sources()
    kept, calls = [], []
    at = 1

    def compute(b):
        calls.append(b.index)
        if b.index == at:
            kept.append(kind(b))

    with rf.Pipeline(SIZE, depth=depth, backend=backend) as p:
        with pytest.raises(BufferError, match="block %d" % at):
            p.run(srcs, compute)
        assert calls == list(range(at + 1))           # no compute after the one that kept a view
        view, read = kept[0]
        if read is not None:
            assert read() == srcs[at]                  # its own block's bytes
        # nothing may refill a slot while the view lives
        with pytest.raises(BufferError, match="outlived its compute"):
            p.run(srcs, lambda b: None)
        with pytest.raises(BufferError, match="outlived its compute"):
            p.acquire(1, b"k" * 64)
        with pytest.raises(BufferError, match="outlived its compute"):
            p.prefetch(1, b"k" * 64)
        with pytest.raises(BufferError):
            p.close()
        if read is not None:
            assert read() == srcs[at]
        del view, read
        kept.clear()
        gc.collect()
        # usable again once the view has ended (for DLPack: once the consumer's deleter ran)
        got = []
        p.run(srcs, lambda b: got.append(bytes(memoryview(b))))
        assert got == srcs
        with p.acquire(1, b"k" * 64) as h:
            assert bytes(memoryview(h)) == b"k" * 64


def test_before_the_fix_a_kept_view_read_a_later_block(backend):
    """What used to happen: the view of block 0 read block 6's bytes after an 8-block run at depth 2."""
    srcs = sources()
    kept = []
    with rf.Pipeline(SIZE, depth=2, backend=backend) as p:
        with pytest.raises(BufferError):
            p.run(srcs, lambda b: kept.append(np.frombuffer(b, np.uint8)) if b.index == 0 else None)
        assert kept[0].tobytes() == srcs[0]
        kept.clear()


def test_views_dropped_in_time_or_returned_are_fine(backend):
    srcs = sources()
    with rf.Pipeline(SIZE, depth=2, backend=backend) as p:
        p.run(srcs, lambda b: np.frombuffer(b, np.uint8))           # the returned view is dropped
        p.run(srcs, lambda b: np.asarray(b.view("U8", (SIZE,))).sum())
        sums = []
        p.run(srcs, lambda b: sums.append(int(np.from_dlpack(b).sum())))
        assert sums == [SIZE * (i + 1) for i in range(NBLOCKS)]
        kept_block = []
        p.run(srcs, kept_block.append)                             # the Block itself may be kept
        with pytest.raises(rf.InvalidArgument):
            memoryview(kept_block[0])                                # but it makes no views any more


class Boom(Exception):
    pass


def test_view_kept_by_a_traceback(backend):
    """compute raises with a view in a local variable: run() raises that exception, and the traceback
    (which keeps the frame, so the view) keeps the slots as they are until it is dropped."""
    srcs = sources()

    def compute(b):
        v = np.frombuffer(b, np.uint8)
        if b.index == 2:
            raise Boom(int(v[0]))

    with rf.Pipeline(SIZE, depth=2, backend=backend) as p:
        with pytest.raises(Boom) as ei:
            p.run(srcs, compute)
        assert ei.value.args == (3,)
        with pytest.raises(BufferError, match="traceback"):
            p.run(srcs, lambda b: None)
        del ei
        gc.collect()
        p.run(srcs, lambda b: None)


def test_held_block_views_are_not_kept(backend):
    """A held block's views are governed by release(), not by runs."""
    with rf.Pipeline(SIZE, depth=2, backend=backend) as p:
        b = p.acquire(5, b"h" * 64)
        m = memoryview(b)
        with pytest.raises(rf.Busy):
            p.run(sources(), lambda blk: None)                      # a block is held
        m.release()
        p.release(b)
        p.run(sources(), lambda blk: None)
