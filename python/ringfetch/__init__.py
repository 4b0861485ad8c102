"""ringfetch: stream blocks of bytes (model weights: MoE experts, layers) through a ring of staging slots,
so that the transfer of the next blocks overlaps the compute of the current one.

A thin CPython extension over the C library (linked in): the C library's rules and errors, unchanged.
docs/python.md is the guide; include/ringfetch.h the contract.

    import ringfetch as rf
    with rf.Pipeline(1 << 20, depth=3, backend="threads") as p:
        p.run([w0, w1, w2], lambda b: consume(numpy.frombuffer(b, numpy.float32)))
"""
from ._ringfetch import (
    HAVE_CUDA,
    BackendError,
    Block,
    Busy,
    CallbackError,
    Canceled,
    ConfigError,
    Error,
    File,
    HazardError,
    InvalidArgument,
    IOError,
    NoDevice,
    NoSpace,
    NotSupported,
    OutOfMemory,
    Pipeline,
    View,
    __version__,
    plan_ring,
)

__all__ = [
    "__version__",
    "plan_ring",
    "Pipeline",
    "Block",
    "View",
    "File",
    "Error",
    "InvalidArgument",
    "OutOfMemory",
    "NoSpace",
    "NoDevice",
    "NotSupported",
    "Busy",
    "Canceled",
    "CallbackError",
    "BackendError",
    "HazardError",
    "ConfigError",
    "IOError",
    "HAVE_CUDA",
]
