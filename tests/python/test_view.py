"""Block.view(dtype, shape, *, offset=0): typed zero-copy views of a block's bytes through the buffer
protocol (numpy, memoryview) and DLPack (numpy, torch: BF16 and the float8 kinds included), windows and
prefixes, bad arguments, and views that keep their block from being given back."""
import ctypes
import gc

import numpy as np
import pytest

import ringfetch as rf

# dtype name -> numpy dtype, for every name numpy has
NUMPY = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
         "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32, "U16": np.uint16,
         "U8": np.uint8, "BOOL": np.bool_, "C64": np.complex64}
# the names numpy has not: what the buffer protocol gives (their raw bits)
BITS = {"BF16": np.uint16, "F8_E4M3": np.uint8, "F8_E4M3FNUZ": np.uint8, "F8_E5M2": np.uint8,
        "F8_E5M2FNUZ": np.uint8, "F8_E8M0": np.uint8}
TORCH = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
         "I32": "int32", "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32", "U16": "uint16",
         "U8": "uint8", "BOOL": "bool", "C64": "complex64", "F8_E4M3": "float8_e4m3fn",
         "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2": "float8_e5m2", "F8_E5M2FNUZ": "float8_e5m2fnuz",
         "F8_E8M0": "float8_e8m0fnu"}
SIZE = 1 << 16


def payload():
    """Bytes that are valid for every dtype (BOOL wants 0 or 1 in each byte)."""
    return (np.arange(SIZE, dtype=np.uint32) % 2).astype(np.uint8).tobytes()


def random_bytes(n=SIZE):
    return np.random.default_rng(5).integers(0, 256, size=n, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("name", sorted(NUMPY) + sorted(BITS))
def test_buffer_protocol_dtype_and_shape(pipeline, name):
    data = payload()[:4096]
    npdt = NUMPY.get(name) or BITS[name]
    item = np.dtype(npdt).itemsize
    shape = (4, 4096 // item // 8)
    with pipeline.acquire(1, data) as b:
        v = b.view(name, shape)
        assert v.dtype == name and v.shape == shape and v.offset == 0 and v.nbytes == 4096 // 2
        a = np.asarray(v)
        assert a.dtype == npdt and a.shape == shape and not a.flags.writeable
        expect = np.frombuffer(data, npdt, count=a.size).reshape(shape)
        np.testing.assert_array_equal(a, expect)
        m = memoryview(v)
        assert m.shape == shape and m.itemsize == item and m.readonly and m.c_contiguous
        f = np.frombuffer(v, np.uint8)          # bytes only: the view's bytes
        assert f.tobytes() == data[:v.nbytes]
        assert a.ctypes.data == f.ctypes.data    # zero-copy, both
        del a, m, f, v


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_numpy_dlpack(pipeline, name):
    data = payload()[:4096]
    with pipeline.acquire(1, data) as b:
        v = b.view(name, (2, 8))
        d = np.from_dlpack(v)
        assert d.dtype == NUMPY[name] and d.shape == (2, 8) and not d.flags.writeable
        np.testing.assert_array_equal(d, np.asarray(v))
        assert v.__dlpack_device__() == (1, 0)
        del d, v


@pytest.mark.parametrize("name", sorted(TORCH))
def test_torch_dlpack(pipeline, name):
    torch = pytest.importorskip("torch")
    tdt = getattr(torch, TORCH[name], None)
    if tdt is None:
        pytest.skip("this torch has no %s" % TORCH[name])
    data = payload()[:4096]
    ref = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    with pipeline.acquire(1, data) as b:
        for offset in (0, 64):
            v = b.view(name, (4, 16), offset=offset)
            t = torch.from_dlpack(v)
            assert t.dtype == tdt and t.shape == (4, 16) and t.device.type == "cpu"
            want = ref[offset:offset + v.nbytes].view(tdt).reshape(4, 16)
            assert torch.equal(t.view(torch.uint8), want.view(torch.uint8))   # the very bits
            del t, v


def test_torch_bf16_contract(pipeline):
    torch = pytest.importorskip("torch")
    w = torch.randn(64, 32).to(torch.bfloat16)
    raw = w.view(torch.uint8).numpy().tobytes()
    with rf.Pipeline(len(raw), depth=2, backend=pipeline.backend) as p:
        with p.acquire(7, raw) as b:
            t = torch.from_dlpack(b.view("BF16", (64, 32)))
            assert t.dtype == torch.bfloat16 and tuple(t.shape) == (64, 32)
            assert torch.equal(t, w)
            # the two capsule kinds (legacy and versioned) carry the same tensor
            v = b.view("BF16", (64, 32))
            for cap in (v.__dlpack__(), v.__dlpack__(max_version=(1, 0))):
                assert torch.equal(torch.utils.dlpack.from_dlpack(cap), w)
            with pytest.raises(BufferError):
                p.release(b)          # t and v are views
            del t, v, cap
            gc.collect()


def test_prefix_and_windows(pipeline):
    data = random_bytes(4096)
    with pipeline.acquire(3, data) as b:
        whole = np.frombuffer(data, np.float32)
        np.testing.assert_array_equal(np.asarray(b.view("F32", (1024,))), whole)
        np.testing.assert_array_equal(np.asarray(b.view("F32", (10,))), whole[:10])      # a prefix
        np.testing.assert_array_equal(np.asarray(b.view("F32", (2, 3), offset=400)),
                                      whole[100:106].reshape(2, 3))                     # a window
        np.testing.assert_array_equal(np.asarray(b.view("F32", 5, offset=4076)), whole[-5:])  # the tail
        s = b.view("I32", ())                                                           # a scalar
        assert s.shape == () and np.asarray(s) == np.frombuffer(data, np.int32)[0]
        z = b.view("F64", (0, 3), offset=4096)                                          # empty, at the end
        assert z.nbytes == 0 and np.asarray(z).shape == (0, 3)
        assert b.view("U8", [2, 2]).shape == (2, 2)                                     # a list
        del s, z
        gc.collect()


def test_bad_arguments(pipeline):
    with pipeline.acquire(1, bytes(4096)) as b:
        with pytest.raises(rf.InvalidArgument, match="unknown dtype"):
            b.view("float32", (4,))
        with pytest.raises(rf.InvalidArgument, match="unknown dtype"):
            b.view("f32", (4,))
        with pytest.raises(TypeError):
            b.view(np.float32, (4,))
        with pytest.raises(TypeError):
            b.view("F32", "4")
        with pytest.raises(TypeError):
            b.view("F32", (4.0,))
        with pytest.raises(rf.InvalidArgument, match="past the block"):
            b.view("F32", (1025,))
        with pytest.raises(rf.InvalidArgument, match="past the block"):
            b.view("F32", (1024,), offset=4)
        with pytest.raises(rf.InvalidArgument, match="past the block"):
            b.view("U8", (1,), offset=4097)
        with pytest.raises(rf.InvalidArgument):
            b.view("F32", (-1,))
        with pytest.raises(rf.InvalidArgument, match="multiple"):
            b.view("F32", (4,), offset=2)
        with pytest.raises(rf.InvalidArgument):
            b.view("U8", (1,) * 65)
        with pytest.raises(rf.InvalidArgument):
            b.view("F64", (1 << 40, 1 << 40))       # the product overflows
        with pytest.raises(rf.InvalidArgument):
            b.view("F32", (0, 1 << 62, 1 << 62))    # no bytes, but strides past any Py_ssize_t
        z = b.view("F32", (0, 1 << 20, 1 << 20))    # empty, with strides that fit
        assert memoryview(z).strides == (1 << 42, 1 << 22, 4) and memoryview(z).nbytes == 0
        del z
        with pytest.raises(TypeError):
            b.view("F32", (4,), 0)                  # offset is keyword-only
        with pytest.raises(TypeError):
            rf.View()
        v = b.view("F32", (4,))
        with pytest.raises(TypeError):
            memoryview(v)[0] = 1.0                  # read-only
        with pytest.raises((TypeError, BufferError)):
            (ctypes.c_char * 16).from_buffer(v)     # a writable buffer is refused
        assert memoryview(v).cast("B").nbytes == 16
        del v
        gc.collect()


def test_view_keeps_the_block(pipeline):
    b = pipeline.acquire(1, b"x" * 64)
    v = b.view("U8", (64,))
    with pytest.raises(BufferError):
        pipeline.release(b)           # the View itself is a view
    a = np.asarray(v)
    m = memoryview(v)
    cap = v.__dlpack__()              # never consumed: its destructor ends it
    with pytest.raises(BufferError):
        v.release()                   # buffers and a capsule taken from it live
    del v
    with pytest.raises(BufferError):
        pipeline.release(b)           # they keep the View, the View the block
    assert bytes(m) == b"x" * 64 and a.tobytes() == b"x" * 64
    del a, m, cap
    pipeline.release(b)


def test_view_release_and_context(pipeline):
    b = pipeline.acquire(2, b"y" * 64)
    with b.view("U8", (8, 8)) as v:
        assert np.asarray(v).sum() == ord("y") * 64
    with pytest.raises(rf.InvalidArgument, match="released"):
        memoryview(v)
    with pytest.raises(rf.InvalidArgument, match="released"):
        v.__dlpack__()
    v.release()                       # twice: nothing
    assert "released" in repr(v) and v.shape == (8, 8)
    pipeline.release(b)               # the released view no longer counts
    with pytest.raises(rf.InvalidArgument):
        b.view("U8", (1,))            # a released block makes no views


def test_views_in_compute(pipeline):
    w = [np.full(1024, i, dtype=np.float32) for i in range(6)]
    sums = []

    def compute(b):
        v = b.view("F32", (32, 32))
        sums.append(float(np.asarray(v).sum()))
        t = np.from_dlpack(b.view("F32", (1024,)))
        assert t[0] == b.index
        del t, v                      # dropped before compute returns

    pipeline.run(w, compute)
    assert sums == [1024.0 * i for i in range(6)]


def test_device_pipeline_views_are_dlpack_only():
    if not rf.HAVE_CUDA:
        pytest.skip("built without CUDA")
    try:
        p = rf.Pipeline(4096, memory="device")
    except rf.NoDevice:
        pytest.skip("no usable GPU")
    torch = pytest.importorskip("torch")
    with p:
        data = np.arange(1024, dtype=np.float32)
        b = p.acquire(1, data, stream=torch.cuda.current_stream().cuda_stream)
        v = b.view("F32", (32, 32))
        assert v.__dlpack_device__() == (2, 0)
        with pytest.raises(BufferError):
            memoryview(v)
        t = torch.from_dlpack(v)
        assert t.device.type == "cuda" and t.dtype == torch.float32 and t.shape == (32, 32)
        assert torch.equal(t.cpu().flatten(), torch.from_numpy(data))
        del t, v
        torch.cuda.synchronize()
        p.release(b)
