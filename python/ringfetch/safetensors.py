"""The safetensors format, read for ringfetch: no torch, no numpy, no `safetensors` package needed.

A safetensors file is an 8-byte little-endian header length N, N bytes of JSON
({name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}), then
the tensors' bytes, each tensor's offsets relative to the end of the header.

    import ringfetch.safetensors as rst
    with rst.open("model.safetensors") as f:
        for name in f.keys():
            dtype, shape, offset, nbytes = f.info(name)   # offset: absolute, in the file
        src = f.source(name)                              # a file source: ringfetch reads the file for it
        with rf.Pipeline(...) as p:
            with p.acquire(key, src) as b: ...

A header can lie, and a checkpoint comes from anywhere: every field is checked against the file before
anything uses it (the header length against the file's size, each tensor's offsets against the data, no
two tensors overlapping, dtype known, shape x itemsize = the tensor's byte count). A header that fails
is rf.InvalidArgument naming the file and the tensor (or the header), never another exception.
"""
import json
import operator
import os
import stat

from ._ringfetch import File, InvalidArgument

__all__ = ["open", "SafetensorsFile", "DTYPE_BITS", "MAX_HEADER_BYTES"]

# Bits per element of each dtype the format names (safetensors' Dtype enum), sub-byte floats included.
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

# The safetensors package refuses headers over 100 MB; so does this reader (a length near the file's
# size is not a header, whatever the file's size).
MAX_HEADER_BYTES = 100_000_000


def _bad(where, what):
    return InvalidArgument("%s: %s" % (where, what))


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _int_arg(who, name, v):
    """An int argument (anything with __index__, numpy integers too, as the package's other calls take
    them); the package's rule: a wrong type is TypeError, a wrong value rf.InvalidArgument."""
    if isinstance(v, bool) or not hasattr(type(v), "__index__"):
        raise TypeError("%s: %s must be an int, not %r" % (who, name, type(v).__name__))
    return operator.index(v)


class _Duplicate(ValueError):
    """A JSON object naming a key twice: well-formed JSON, but not a header (which tensor is it?)."""


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate("header names %r twice" % (k,))
        out[k] = v
    return out


def _check_tensor(where, name, entry, data_bytes):
    """One header entry -> (dtype, shape, begin, end), offsets relative to the data."""
    tw = "%s: tensor %r" % (where, name)
    if not isinstance(entry, dict):
        raise InvalidArgument("%s: its entry is not a JSON object" % tw)
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offs = entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise InvalidArgument("%s: unknown dtype %r" % (tw, dtype))
    if not isinstance(shape, list) or not all(_is_int(d) for d in shape):
        raise InvalidArgument("%s: shape %r is not a list of integers" % (tw, shape))
    if any(d < 0 for d in shape):
        raise InvalidArgument("%s: shape %r has a negative dimension" % (tw, shape))
    if not isinstance(offs, list) or len(offs) != 2 or not all(_is_int(o) for o in offs):
        raise InvalidArgument("%s: data_offsets %r is not a pair of integers" % (tw, offs))
    begin, end = offs
    if begin < 0 or end < begin:
        raise InvalidArgument("%s: data_offsets %r is not a range" % (tw, offs))
    if end > data_bytes:
        raise InvalidArgument("%s: data_offsets %r run past the end of the data (%d bytes after the header: "
                              "a truncated file?)" % (tw, offs, data_bytes))
    count = 1
    for d in shape:
        count *= d
    bits = count * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != end - begin:
        raise InvalidArgument("%s: shape %r of %s is %s bytes, data_offsets %r hold %d" % (
            tw, shape, dtype, bits // 8 if bits % 8 == 0 else "%d/8" % bits, offs, end - begin))
    return dtype, tuple(shape), begin, end


def parse_header(head, file_size, where="safetensors file"):
    """Parse and check a safetensors header. `head` is the file's first bytes (at least 8, and the whole
    header where the file holds it), `file_size` the file's size. Returns (data_start, tensors, metadata):
    data_start the absolute offset where the data begins, tensors {name: (dtype, shape, offset, nbytes)}
    with absolute offsets, metadata the "__metadata__" dict ({} without one). Raises rf.InvalidArgument
    for anything that is not a well-formed header for a file of that size; nothing else."""
    if not _is_int(file_size) or file_size < 0:
        raise TypeError("file_size must be a non-negative int")
    head = bytes(head)
    if file_size < 8 or len(head) < 8:
        raise _bad(where, "%d bytes is too small for a safetensors file (an 8-byte header length first)"
                   % min(file_size, len(head)))
    n = int.from_bytes(head[:8], "little")
    if n > MAX_HEADER_BYTES:
        raise _bad(where, "header length %d is absurd (over %d bytes): not a safetensors file"
                   % (n, MAX_HEADER_BYTES))
    if 8 + n > file_size:
        raise _bad(where, "header length %d runs past the file (%d bytes)" % (n, file_size))
    if n < 2:
        raise _bad(where, "header length %d is too short for a JSON object" % n)
    if len(head) < 8 + n:
        raise _bad(where, "header length %d, but only %d header bytes given" % (n, len(head) - 8))
    try:
        doc = json.loads(head[8:8 + n].decode("utf-8"), object_pairs_hook=_no_duplicates)
    except _Duplicate as e:
        raise _bad(where, str(e)[:200]) from None
    except (ValueError, RecursionError) as e:   # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _bad(where, "header is not JSON: %s" % (str(e)[:200],)) from None
    if not isinstance(doc, dict):
        raise _bad(where, "header is not a JSON object")
    meta = doc.pop("__metadata__", None)
    if meta is None:
        meta = {}
    elif not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise _bad(where, "header __metadata__ is not an object of strings")
    data_start = 8 + n
    data_bytes = file_size - data_start
    spans = []
    tensors = {}
    for name, entry in doc.items():
        dtype, shape, begin, end = _check_tensor(where, name, entry, data_bytes)
        tensors[name] = (dtype, shape, data_start + begin, end - begin)
        if end > begin:
            spans.append((begin, end, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise _bad(where, "tensor %r (data_offsets [%d, %d]) overlaps tensor %r ([%d, %d])"
                       % (n1, b1, e1, n0, b0, e0))
    return data_start, tensors, dict(meta)


class SafetensorsFile:
    """An open safetensors file (ringfetch.safetensors.open). Its tensors' bytes are file sources: slices of
    an rf.File, which ringfetch reads (O_DIRECT where it can) instead of faulting a mapping in."""

    def __init__(self, path, *, buffered=False):
        self.path = os.fspath(path)
        self._file = self._mv = None
        st = os.stat(self.path)          # FileNotFoundError for a missing file, as open() gives
        if stat.S_ISREG(st.st_mode) and st.st_size == 0:
            raise InvalidArgument("%s: an empty file is not a safetensors file" % self.path)
        self._file = File(self.path, buffered=buffered)
        try:
            self._mv = memoryview(self._file)
            size = self._file.size
            # through the file's own descriptor: another file renamed over the path meanwhile is not read
            head = self._file.pread(8, 0) if size >= 8 else b""
            n = int.from_bytes(head, "little") if len(head) == 8 else 0
            if 8 < 8 + n <= size and n <= MAX_HEADER_BYTES:
                head += self._file.pread(n, 8)
            self.data_start, self._tensors, self._metadata = parse_header(head, size, self.path)
        except BaseException:
            self.close()
            raise

    @property
    def size(self):
        """The file's size at open."""
        return self._file.size

    @property
    def closed(self):
        return self._file is None or self._file.closed

    def keys(self):
        """The tensors' names, sorted (as the safetensors package lists them)."""
        return sorted(self._tensors)

    def metadata(self):
        """The header's "__metadata__" (a dict of strings; {} without one)."""
        return dict(self._metadata)

    def __contains__(self, name):
        return name in self._tensors

    def __len__(self):
        return len(self._tensors)

    def info(self, name):
        """(dtype, shape, offset, nbytes): dtype as the format names it ("F32", "BF16", ...), shape a
        tuple, offset the tensor's first byte in the file (absolute), nbytes its byte count.
        KeyError for a name the file does not hold."""
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError("%s holds no tensor %r" % (self.path, name)) from None

    def source(self, name, start=0, stop=None):
        """A file source of the tensor's bytes (or of bytes [start, stop) of them): a read-only memoryview
        slice of this file's rf.File, for Pipeline.run / acquire / prefetch. Keep it no longer than
        needed: close() is BufferError while one is alive (a pipeline keeps a key's source until evict)."""
        if self.closed:
            raise InvalidArgument("%s: the file is closed" % self.path)
        _, _, off, nbytes = self.info(name)
        stop = nbytes if stop is None else stop
        start, stop = _int_arg("source", "start", start), _int_arg("source", "stop", stop)
        if not 0 <= start <= stop <= nbytes:
            raise InvalidArgument("%s: tensor %r: bytes [%r, %r) are not inside its %d bytes"
                                  % (self.path, name, start, stop, nbytes))
        return self._mv[off + start:off + stop]

    def file_source(self, offset, nbytes):
        """A file source of any nbytes bytes of the file from the absolute `offset` (several adjacent
        tensors read as one, say)."""
        if self.closed:
            raise InvalidArgument("%s: the file is closed" % self.path)
        offset, nbytes = _int_arg("file_source", "offset", offset), _int_arg("file_source", "nbytes", nbytes)
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise InvalidArgument("%s: bytes [%r, +%r) are not inside the file (%d bytes)"
                                  % (self.path, offset, nbytes, self.size))
        return self._mv[offset:offset + nbytes]

    def close(self):
        """Close the file (rf.File.close: BufferError while a source of it is alive, nothing changes)."""
        mv = getattr(self, "_mv", None)
        if mv is not None:
            self._mv = None
            mv.release()
        f = getattr(self, "_file", None)
        if f is not None and not f.closed:
            try:
                f.close()
            except BaseException:
                self._mv = memoryview(f)
                raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self.closed else "%d tensors" % len(getattr(self, "_tensors", ()))
        return "<ringfetch.safetensors file %r, %s>" % (self.path, state)


def open(path, *, buffered=False):  # noqa: A001 (the module's verb, as safetensors' safe_open)
    """Open a safetensors file: the header read and checked (rf.InvalidArgument naming the tensor or the
    header when it is not well formed for this file), the file opened as an rf.File (buffered: never
    O_DIRECT). A context manager; close() when done."""
    return SafetensorsFile(path, buffered=buffered)
