"""powerperf-rt region markers for Python, through ctypes.

    import powerperf_rt as pp
    with pp.region("solve"):
        ...
    h = pp.handle("step")          # resolve once, then begin/end by handle
    with h:
        ...

The library is found through POWERPERF_RT_LIB (a path to libpowerperf_rt.so), else
"libpowerperf_rt.so" on the loader path. Without POWERPERF_RUN_DIR every call is a no-op.
Misuse (end without begin, mismatched nesting) returns a negative errno from begin()/end()
and never raises; ``region``/``Handle`` as context managers ignore it.
"""

import contextlib
import ctypes
import os

_lib = ctypes.CDLL(os.environ.get("POWERPERF_RT_LIB") or "libpowerperf_rt.so")

for _n in ("pp_region_begin", "pp_region_end"):
    getattr(_lib, _n).argtypes = [ctypes.c_char_p]
    getattr(_lib, _n).restype = ctypes.c_int
_lib.pp_region_handle.argtypes = [ctypes.c_char_p]
_lib.pp_region_handle.restype = ctypes.c_int32
for _n in ("pp_region_begin_h", "pp_region_end_h"):
    getattr(_lib, _n).argtypes = [ctypes.c_int32]
    getattr(_lib, _n).restype = ctypes.c_int
_lib.pp_flush.argtypes = []
_lib.pp_flush.restype = None
_lib.pp_enabled.argtypes = []
_lib.pp_enabled.restype = ctypes.c_int


def _b(name):
    return name.encode() if isinstance(name, str) else name


def begin(name):
    """Begin region `name` on the calling thread; 0 or a negative errno."""
    return _lib.pp_region_begin(_b(name))


def end(name):
    """End region `name` on the calling thread; 0 or a negative errno."""
    return _lib.pp_region_end(_b(name))


def flush():
    """Write every thread's buffered events to the events file."""
    _lib.pp_flush()


def enabled():
    """True when regions are recorded (POWERPERF_RUN_DIR set and usable)."""
    return _lib.pp_enabled() == 1


@contextlib.contextmanager
def region(name):
    """Context manager: the region is open inside the `with` block."""
    n = _b(name)
    _lib.pp_region_begin(n)
    try:
        yield
    finally:
        _lib.pp_region_end(n)


class Handle:
    """A region resolved once; begin/end skip the name lookup. Usable as `with h:`."""

    def __init__(self, name):
        self.name = name
        self.h = _lib.pp_region_handle(_b(name))

    def begin(self):
        return _lib.pp_region_begin_h(self.h)

    def end(self):
        return _lib.pp_region_end_h(self.h)

    def __enter__(self):
        self.begin()
        return self

    def __exit__(self, *exc):
        self.end()
        return False


def handle(name):
    """The Handle of region `name`."""
    return Handle(name)
