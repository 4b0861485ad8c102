"""Plain reads of an rf.File's buffer after the file shrank: the interpreter survives (the bytes past the
file's new end read as zeros), while the library's own read of that range raises rf.IOError; a SIGBUS
that is not about a live File still reaches the handler installed before (faulthandler) or kills the
process as SIGBUS does. Each case runs in a child process: a failure there is a signal, not a test."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent("""
    import mmap, os, sys, threading
    import numpy as np
    import ringfetch as rf
    d = sys.argv[1]

    def make(name, n=1 << 20):
        path = os.path.join(d, name)
        with open(path, "wb") as fh:
            fh.write(np.random.default_rng(len(name)).integers(1, 256, size=n, dtype=np.uint8).tobytes())
        return path
""")


def child(tmp_path, body, *flags):
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, *flags, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("flags", [(), ("-X", "faulthandler")], ids=["plain", "faulthandler"])
def test_reads_after_shrink_survive(tmp_path, flags):
    r = child(tmp_path, """
        path = make("w.bin")
        keep = open(path, "rb").read()
        f = rf.File(path)
        os.truncate(path, 5000)                     # shrinks under the mapping
        mv = memoryview(f)
        assert bytes(mv[:5000]) == keep[:5000]      # what is still in the file reads as before
        assert bytes(mv[5000:8192]) == bytes(8192 - 5000)   # the rest of the last page: zeros
        tail = bytes(mv[8192:])                     # past the end: SIGBUS without the handler
        assert tail == bytes(len(tail)), "zeros past the new end"
        assert np.asarray(mv[100000:200000]).sum() == 0     # numpy reads it too
        out = []                                    # and another thread
        t = threading.Thread(target=lambda: out.append(bytes(mv[500000:600000]) == bytes(100000)))
        t.start(); t.join()
        assert out == [True]
        # the library's own read of such a range is rf.IOError, never zeros
        with rf.Pipeline(1 << 16, depth=2, backend="threads") as p:
            try:
                p.run([mv[65536:131072]], lambda b: None)
            except rf.IOError as e:
                assert "shrank" in str(e), e
            else:
                raise AssertionError("the run read a range past the file's end")
            try:
                p.acquire(1, mv[65536:131072])
            except rf.IOError:
                pass
            else:
                raise AssertionError("the acquire read a range past the file's end")
        del mv
        f.close()
        print("ok")
    """, *flags)
    assert r.returncode == 0 and r.stdout == "ok\n", (r.returncode, r.stdout, r.stderr)


def test_many_files(tmp_path):
    """More live Files than one chunk of the handler's table holds; closed ones leave it."""
    r = child(tmp_path, """
        paths = [make("f%d.bin" % i, 16384) for i in range(150)]
        files = [rf.File(p) for p in paths]
        for f in files[:100:2]:
            f.close()                               # free entries in the middle, reused below
        mpaths = [make("g%d.bin" % i, 16384) for i in range(60)]
        more = [rf.File(p) for p in mpaths]
        for f, path in ((files[1], paths[1]), (files[149], paths[149]), (more[-1], mpaths[-1])):
            os.truncate(path, 0)
            m = memoryview(f)
            assert bytes(m) == bytes(16384)
            del m
        print("ok")
    """)
    assert r.returncode == 0 and r.stdout == "ok\n", (r.returncode, r.stdout, r.stderr)


@pytest.mark.parametrize("flags", [(), ("-X", "faulthandler")], ids=["plain", "faulthandler"])
def test_other_sigbus_still_kills(tmp_path, flags):
    """A fault in a mapping that is not an rf.File's is passed on: the process dies of SIGBUS, and
    faulthandler (installed before) still prints its traceback."""
    r = child(tmp_path, """
        f = rf.File(make("w.bin"))                  # the handler is installed
        path = make("other.bin")
        fh = open(path, "r+b")
        m = mmap.mmap(fh.fileno(), 1 << 20, prot=mmap.PROT_READ)
        os.truncate(path, 0)
        print("reading", flush=True)
        m[500000:500010]                            # not ours
        print("survived")
    """, *flags)
    assert r.returncode == -signal.SIGBUS, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == "reading\n"
    if flags:
        assert "Fatal Python error: Bus error" in r.stderr, r.stderr


def test_sent_sigbus_still_kills(tmp_path):
    """A SIGBUS sent by kill(), whatever the address, is not a fault to serve."""
    r = child(tmp_path, """
        f = rf.File(make("w.bin"))
        os.kill(os.getpid(), 7)
        print("survived")
    """)
    assert r.returncode == -signal.SIGBUS and "survived" not in r.stdout, (r.returncode, r.stdout, r.stderr)


def test_handler_passes_to_a_python_handler(tmp_path):
    """A handler installed before the first File (here a Python-level one, for a sent SIGBUS) still
    gets what is not ours."""
    r = child(tmp_path, """
        import signal
        got = []
        signal.signal(signal.SIGBUS, lambda s, fr: got.append(s))
        f = rf.File(make("w.bin"))
        os.kill(os.getpid(), signal.SIGBUS)
        assert got == [signal.SIGBUS], got
        os.truncate(f"{d}/w.bin", 0)
        assert bytes(memoryview(f)[4096:8192]) == bytes(4096)   # and ours are still served
        print("ok")
    """)
    assert r.returncode == 0 and r.stdout == "ok\n", (r.returncode, r.stdout, r.stderr)


def test_handler_back_after_faulthandler_disable(tmp_path):
    """faulthandler.disable() puts back what it found (the default action, taking ours away with it):
    the next File installs ours again."""
    r = child(tmp_path, """
        import faulthandler
        faulthandler.enable()
        f = rf.File(make("a.bin"))                  # ours, over faulthandler's
        faulthandler.disable()                      # back to the default: ours is gone
        g = rf.File(make("b.bin"))                  # ours again
        os.truncate(f"{d}/a.bin", 0)
        assert bytes(memoryview(f)[8192:12288]) == bytes(4096)
        print("ok")
    """)
    assert r.returncode == 0 and r.stdout == "ok\n", (r.returncode, r.stdout, r.stderr)
