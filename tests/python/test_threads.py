"""The GIL, threads and garbage collection: another Python thread runs while the library copies and
waits; two threads on one pipeline get rf.Busy, never a crash; a pipeline collected with blocks held
drops them; nothing prints."""
import gc
import sys
import threading
import weakref

import numpy as np
import pytest

import ringfetch as rf

BIG = 64 << 20


class Spinner:
    """A Python thread that counts while it holds the GIL. With a long switch interval it gets the GIL
    only when the main thread gives it up itself: so progress during a library call proves the call
    released the GIL (without that, the count stays the same, exactly)."""

    def __init__(self):
        self.count = 0
        self.stop = False
        self.t = threading.Thread(target=self.spin, daemon=True)

    def spin(self):
        while not self.stop:
            self.count += 1

    def __enter__(self):
        self.old = sys.getswitchinterval()
        sys.setswitchinterval(0.5)
        self.t.start()
        while self.count == 0:
            pass  # the switch interval hands it the GIL once
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.t.join()
        sys.setswitchinterval(self.old)


@pytest.fixture(scope="module")
def big():
    return np.ones(BIG, dtype=np.uint8)


def test_gil_released_during_acquire(backend, big):
    with rf.Pipeline(BIG, depth=1, backend=backend) as p, Spinner() as s:
        c0 = s.count
        b = p.acquire(1, big)           # a miss: 64 MiB copied
        c1 = s.count
        p.release(b)
    assert c1 > c0, "the other thread did not run while acquire copied"


def test_gil_released_during_run(backend, big):
    seen = []
    with rf.Pipeline(BIG, depth=1, backend=backend) as p, Spinner() as s:
        c0 = s.count
        p.run([big], lambda b: seen.append(s.count))
    assert seen and seen[0] > c0, "the other thread did not run while the run copied"


def test_two_threads_one_pipeline(backend):
    p = rf.Pipeline(1 << 20, depth=2, backend=backend)
    inside = threading.Event()
    go_on = threading.Event()
    errors = []

    def compute(b):
        inside.set()
        go_on.wait(5)     # releases the GIL: the main thread tries the pipeline meanwhile

    t = threading.Thread(target=lambda: p.run([bytes(1 << 20)] * 2, compute))
    t.start()
    assert inside.wait(5)
    for call in (lambda: p.acquire(1, b"x"), lambda: p.run([b"y"], lambda b: None), p.close,
                 lambda: p.prefetch(2, b"z")):
        try:
            call()
        except rf.Busy as e:
            errors.append(str(e))
    # any-thread calls are fine during the run
    p.stats()
    p.keyed_stats()
    assert p.lookup(1) == ("absent", None)
    go_on.set()
    t.join()
    assert len(errors) == 4 and all("another thread" in e for e in errors)
    p.close()


def test_gc_with_holds(backend, capfd):
    p = rf.Pipeline(4096, depth=2, backend=backend)
    r = weakref.ref(p)
    b1 = p.acquire(1, b"one")
    p.acquire(2, b"two")               # dropped at once: its destructor releases the hold
    assert p.lookup(2)[0] == "ready"
    b3 = p.acquire(3, b"three")        # so its slot can be taken: both slots held now
    with pytest.raises(rf.NoSpace):
        p.acquire(4, b"four")
    cycle = [p, b1, b3]
    cycle.append(cycle)                # only the collector can free these
    del p, b1, b3, cycle
    gc.collect()
    assert r() is None
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_block_keeps_pipeline_alive(backend):
    p = rf.Pipeline(4096, depth=2, backend=backend)
    r = weakref.ref(p)
    b = p.acquire(1, b"data")
    v = np.frombuffer(b, np.uint8)
    del p, b
    gc.collect()
    assert r() is not None             # the view keeps the block, the block its pipeline
    assert bytes(v) == b"data"
    del v
    gc.collect()
    assert r() is None


def test_block_released_from_another_thread(backend):
    p = rf.Pipeline(4096, depth=2, backend=backend)
    holder = [p.acquire(1, b"x")]
    t = threading.Thread(target=holder.clear)  # the destructor runs on that thread
    t.start()
    t.join()
    b = p.acquire(2, b"y")
    c = p.acquire(3, b"z")             # both slots free again: the hold of key 1 was released
    p.release(b)
    p.release(c)
    p.close()
