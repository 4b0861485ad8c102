"""Errors: the class per RF_E* code, its builtin base, .code / .name / str(), and what argument
checking raises (TypeError for a wrong type, rf.InvalidArgument for a wrong value)."""
import errno

import pytest

import ringfetch as rf

CLASSES = [
    ("InvalidArgument", -1, "RF_EINVAL", ValueError),
    ("OutOfMemory", -2, "RF_ENOMEM", MemoryError),
    ("NoSpace", -3, "RF_ENOSPC", None),
    ("NoDevice", -4, "RF_ENODEV", None),
    ("NotSupported", -5, "RF_ENOTSUP", None),
    ("Busy", -6, "RF_EBUSY", None),
    ("Canceled", -7, "RF_ECANCELED", None),
    ("CallbackError", -8, "RF_ECALLBACK", None),
    ("BackendError", -9, "RF_EBACKEND", None),
    ("HazardError", -10, "RF_EHAZARD", None),
    ("ConfigError", -11, "RF_ECONFIG", None),
    ("IOError", -12, "RF_EIO", OSError),
]


@pytest.mark.parametrize("name,code,cname,builtin", CLASSES)
def test_classes(name, code, cname, builtin):
    cls = getattr(rf, name)
    assert issubclass(cls, rf.Error) and issubclass(rf.Error, Exception)
    assert cls.__module__ == "ringfetch" and cls.__name__ == name
    assert cls.code == code and cls.name == cname
    if builtin is not None:
        assert issubclass(cls, builtin)
    # Only the three named in the contract derive from a builtin besides Exception.
    for other in (ValueError, MemoryError, OSError):
        if other is not builtin:
            assert not issubclass(cls, other)


def test_instance_fields():
    with pytest.raises(rf.InvalidArgument) as ei:
        rf.Pipeline(0)
    e = ei.value
    assert e.code == -1 and e.name == "RF_EINVAL"
    assert "slot_bytes" in str(e) and str(e).startswith("rf_pipeline_create")
    assert isinstance(e, ValueError)


def test_unknown_backend_is_nodevice():
    with pytest.raises(rf.NoDevice) as ei:
        rf.Pipeline(4096, backend="warp-drive")
    assert ei.value.code == -4 and "warp-drive" in str(ei.value)


def test_device_memory_without_gpu():
    if rf.HAVE_CUDA:
        try:
            rf.Pipeline(4096, memory="device").close()
            pytest.skip("a usable GPU is here: memory='device' works")
        except rf.NoDevice as e:
            assert e.code == -4 and str(e)
    else:
        with pytest.raises(rf.Error):
            rf.Pipeline(4096, memory="device")


def test_backend_of_other_kind():
    with pytest.raises(rf.InvalidArgument):
        rf.Pipeline(4096, backend="cuda", memory="host")


def test_config_error_from_environment(monkeypatch):
    monkeypatch.setenv("RINGFETCH_DEPTH", "abc")
    with pytest.raises(rf.ConfigError) as ei:
        rf.Pipeline(4096)
    assert ei.value.code == -11 and "RINGFETCH_DEPTH" in str(ei.value) and "abc" in str(ei.value)


@pytest.mark.parametrize("kwargs,exc", [
    (dict(depth="3"), rf.InvalidArgument),     # a str other than "auto"
    (dict(depth=2.0), TypeError),
    (dict(depth=-1), rf.InvalidArgument),
    (dict(depth=1 << 40), rf.InvalidArgument),
    (dict(depth=5000), rf.InvalidArgument),    # > RF_MAX_DEPTH: the library's check
    (dict(backend=3), TypeError),
    (dict(memory="gpu"), rf.InvalidArgument),
    (dict(memory=1), TypeError),
    (dict(copy_queues="2"), TypeError),
    (dict(staging="node:"), rf.InvalidArgument),
    (dict(staging=b"auto"), TypeError),
    (dict(wait="spin:x"), rf.InvalidArgument),
    (dict(wait=1), TypeError),
    (dict(backend="cpu\0threads"), rf.InvalidArgument),   # not cut short at the NUL
    (dict(staging="auto\0"), rf.InvalidArgument),
    (dict(wait="sleep\0"), rf.InvalidArgument),
    (dict(backend="cpu\udc80"), rf.InvalidArgument),     # no UTF-8 for a lone surrogate
])
def test_pipeline_arguments(kwargs, exc):
    with pytest.raises(exc):
        rf.Pipeline(4096, **kwargs)


def test_keyword_only_and_slot_bytes_type():
    with pytest.raises(TypeError):
        rf.Pipeline(4096, 2)  # depth is keyword-only
    with pytest.raises(TypeError):
        rf.Pipeline("4096")
    with pytest.raises(rf.InvalidArgument):
        rf.Pipeline(-1)


def test_run_and_keyed_argument_errors(pipeline):
    with pytest.raises(TypeError):
        pipeline.run([b"x"], 3)                      # compute not callable
    with pytest.raises(TypeError):
        pipeline.run(b"abc", lambda b: None)          # a buffer, not a sequence of them
    with pytest.raises(TypeError) as ei:
        pipeline.run([b"x", 7], lambda b: None)
    assert "source 1" in str(ei.value) and "'int'" in str(ei.value)
    with pytest.raises(rf.InvalidArgument):
        pipeline.run([bytes(4097)], lambda b: None)   # over slot_bytes: the library's check
    with pytest.raises(TypeError):
        pipeline.acquire("k", b"x")
    with pytest.raises(rf.InvalidArgument):
        pipeline.acquire(-1, b"x")
    with pytest.raises(rf.InvalidArgument):
        pipeline.acquire(1 << 64, b"x")
    with pytest.raises(TypeError):
        pipeline.acquire(1, "text")
    with pytest.raises(TypeError):
        pipeline.acquire(1, b"x", 0)                 # stream is keyword-only
    with pytest.raises(TypeError):
        pipeline.acquire(1, b"x", strem=None)
    with pytest.raises(rf.InvalidArgument):
        pipeline.acquire(1, b"x", stream=5)          # a stream on a host pipeline: the library's check
    with pytest.raises(rf.InvalidArgument):
        pipeline.acquire(1, b"")                     # 0 bytes
    with pytest.raises(TypeError):
        pipeline.release(b"x")
    with pytest.raises(TypeError):
        pipeline.evict("k")
    with pytest.raises(TypeError):
        pipeline.lookup(1.0)


def test_non_contiguous_source(pipeline):
    np = pytest.importorskip("numpy")
    a = np.arange(64, dtype=np.uint8)[::2]
    with pytest.raises(rf.InvalidArgument) as ei:
        pipeline.run([a], lambda b: None)
    assert "contiguous" in str(ei.value)


def test_closed_pipeline():
    p = rf.Pipeline(4096, backend="cpu")
    p.close()
    p.close()  # twice: a no-op
    assert p.closed
    for call in (lambda: p.run([b"x"], lambda b: None), lambda: p.acquire(1, b"x"), p.describe,
                 lambda: p.depth, p.stats):
        with pytest.raises(rf.InvalidArgument):
            call()


def test_errno_of_ioerror(tmp_path):
    with pytest.raises(rf.IOError) as ei:
        rf.File(tmp_path / "missing")
    assert isinstance(ei.value, OSError) and ei.value.code == -12
    assert "missing" in str(ei.value) and errno.errorcode  # the path is named
