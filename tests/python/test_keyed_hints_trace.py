"""Pipeline(hint_bytes=...) (bounded hints, docs/serving.md "Bounded hints") and Pipeline.keyed_trace
(the access trace, docs/serving.md "Access traces"): accepted values change the slot choice as the C
contract says, wrong ones raise; a trace holds the documented header and one record per keyed call."""
import os
import pathlib
import struct

import numpy as np
import pytest

import ringfetch as rf

SLOT = 4096
HEADER = struct.Struct("<8sIIIIQ")   # magic, version, record_bytes, slots, flags, slot_bytes
RECORD = struct.Struct("<QQQII")     # key, bytes, ns, kind, slot
NONE = 0xFFFFFFFF
HIT, MISS, HINTED, PREFETCH, PRESENT, RELEASE, EVICT, RESET = range(1, 9)


@pytest.fixture(autouse=True)
def no_configured_bound(monkeypatch):
    """hint_bytes=0 means the configured value: keep the environment's out of these tests."""
    monkeypatch.delenv("RINGFETCH_HINT_BYTES", raising=False)
    monkeypatch.delenv("RINGFETCH_CONFIG", raising=False)
    monkeypatch.delenv("RINGFETCH_KEYED_TRACE", raising=False)


def slots_after_two_hints(backend, hint_bytes):
    """Hint key 1, take a demand miss of key 2, hint key 3; return (lookup(1), lookup(3), stats).

    The hints are 2100 bytes each, so with hint_bytes=SLOT the second one would not fit beside the first
    (4200 > 4096). The first hint took 2100 of the credit (which starts at hint_bytes); the miss of key 2
    (4096 bytes) earns 4096 / 32 = 128 back, so the second hint finds 2124 >= 2100 and is accepted rather
    than dropped at once by the credit."""
    a, b = np.full(2100, 1, np.uint8), np.full(2100, 3, np.uint8)
    c = np.full(SLOT, 2, np.uint8)
    with rf.Pipeline(SLOT, depth=4, backend=backend, hint_bytes=hint_bytes) as p:
        p.prefetch(1, a)                          # the lowest-numbered empty slot: 0
        assert p.lookup(1) in (("copying", 0), ("ready", 0))
        with p.acquire(2, c) as blk:             # a miss: the next empty slot
            assert blk.slot == 1
        p.prefetch(3, b)
        return p.lookup(1), p.lookup(3), p.keyed_stats()


def test_hint_bytes_second_hint_takes_first_hints_slot(backend):
    one, three, ks = slots_after_two_hints(backend, SLOT)
    # Over the bound, the hint takes the oldest unacquired hint's slot, though slots 2 and 3 are empty.
    assert one == ("absent", None)
    assert three[0] in ("copying", "ready") and three[1] == 0
    assert ks["prefetches"] == 2
    assert ks["dropped"] + ks["wasted"] == 1      # key 1's hint: withdrawn before its copy, or wasted


def test_no_hint_bytes_is_the_plain_rule(backend):
    one, three, ks = slots_after_two_hints(backend, 0)
    # No bound: the lowest-numbered empty slot, and the first hint stays.
    assert one[0] in ("copying", "ready") and one[1] == 0
    assert three[0] in ("copying", "ready") and three[1] == 2
    assert ks["dropped"] == 0 and ks["wasted"] == 0


def test_hint_over_hint_bytes_is_dropped_at_once(backend):
    with rf.Pipeline(SLOT, depth=4, backend=backend, hint_bytes=1000) as p:
        p.prefetch(1, b"x" * 1001)                # more than the whole credit: no slot taken
        assert p.lookup(1) == ("absent", None)
        ks = p.keyed_stats()
        assert ks["prefetches"] == 1 and ks["dropped"] == 1 and ks["bytes_copied"] == 0
        p.prefetch(2, b"y" * 1000)                # within it: a slot, as ever
        assert p.lookup(2)[0] in ("copying", "ready")


def test_hint_bytes_values(backend):
    for ok in (0, 1, SLOT, 1 << 40, 2**64 - 1, np.uint64(SLOT)):
        rf.Pipeline(SLOT, depth=2, backend=backend, hint_bytes=ok).close()
    for bad in ("4096", 4096.0, None, b"1"):
        with pytest.raises(TypeError, match="hint_bytes"):
            rf.Pipeline(SLOT, depth=2, backend=backend, hint_bytes=bad)
    for bad in (-1, 2**64, np.int64(-5)):
        with pytest.raises(rf.InvalidArgument, match="hint_bytes"):
            rf.Pipeline(SLOT, depth=2, backend=backend, hint_bytes=bad)
    with pytest.raises(TypeError):
        rf.Pipeline(SLOT, 2, backend, "host", 0, None, None, 0, SLOT)  # keyword-only


def read_trace(path):
    data = pathlib.Path(path).read_bytes()
    assert len(data) >= HEADER.size and (len(data) - HEADER.size) % RECORD.size == 0
    head = HEADER.unpack_from(data)
    recs = [RECORD.unpack_from(data, off) for off in range(HEADER.size, len(data), RECORD.size)]
    return head, recs


def test_keyed_trace_records_the_calls(backend, tmp_path):
    path = tmp_path / "keyed.trace"              # an os.PathLike
    w, h = b"w" * 100, b"h" * 200
    with rf.Pipeline(SLOT, depth=4, backend=backend) as p:
        p.keyed_trace(path)
        with p.acquire(5, w) as b:               # a miss, then its release
            s5 = b.slot
        with p.acquire(5, w):                    # a hit
            pass
        p.prefetch(6, h)                         # absent: its slot chosen now
        s6 = p.lookup(6)[1]
        p.prefetch(6, h)                         # present
        p.evict(5)
        p.evict(99)                              # absent: recorded too
        with pytest.raises(rf.InvalidArgument):
            p.prefetch(7, b"")                   # a failed call adds no record
        # No source pinned when the run comes: after a run the package evicts the keys it still pins
        # (letting go of their sources), and those evicts would be recorded as well.
        p.evict(6)
        p.run([b"r" * 10], lambda blk: None)     # empties the cache
        p.keyed_trace(None)
        size = path.stat().st_size
        with p.acquire(8, w):                    # stopped: nothing more is written
            pass
        assert path.stat().st_size == size
        p.keyed_trace(None)                      # stop with none on: fine
    head, recs = read_trace(path)
    assert head == (b"RFKTRACE", 1, RECORD.size, 4, 0, SLOT)
    got = [(key, nbytes, kind, slot) for key, nbytes, _, kind, slot in recs]
    assert got == [
        (5, 100, MISS, s5), (5, 100, RELEASE, s5),
        (5, 100, HIT, s5), (5, 100, RELEASE, s5),
        (6, 200, PREFETCH, s6), (6, 200, PRESENT, s6),
        (5, 0, EVICT, NONE), (99, 0, EVICT, NONE), (6, 0, EVICT, NONE),
        (0, 0, RESET, NONE),
    ]
    ns = [r[2] for r in recs]
    assert ns == sorted(ns)


def test_keyed_trace_str_path_and_close_finishes_it(backend, tmp_path):
    path = str(tmp_path / "t.trace")
    p = rf.Pipeline(SLOT, depth=2, backend=backend)
    p.keyed_trace(path)
    p.prefetch(1, b"a" * 10)
    p.close()                                    # destroy writes the rest and closes the file
    head, recs = read_trace(path)
    assert head[3] == 2 and [(r[0], r[3]) for r in recs] == [(1, PREFETCH)]


def test_keyed_trace_errors(backend, tmp_path):
    with rf.Pipeline(SLOT, depth=2, backend=backend) as p:
        with pytest.raises(rf.IOError) as e:
            p.keyed_trace(tmp_path / "missing-dir" / "k.trace")
        assert isinstance(e.value, OSError) and e.value.name == "RF_EIO"
        with pytest.raises(rf.InvalidArgument):
            p.keyed_trace("")
        with pytest.raises(TypeError):
            p.keyed_trace(3)
        with pytest.raises(TypeError):
            p.keyed_trace()                      # path is required: None stops
        p.keyed_trace(os.fspath(tmp_path / "a.trace"))
        with pytest.raises(rf.Busy):
            p.keyed_trace(tmp_path / "b.trace")  # one at a time
        assert not (tmp_path / "b.trace").exists()
        p.keyed_trace(None)
        p.keyed_trace(tmp_path / "b.trace")      # stopped: a new one may start
        p.keyed_trace(None)

        def compute(blk):
            with pytest.raises(rf.Busy):
                p.keyed_trace(None)              # not from a compute callback
        p.run([b"x"], compute)
    with pytest.raises(rf.InvalidArgument):
        p.keyed_trace(None)                      # closed
