"""pytest setup for the nvfp4 package tests.

Imports the package from bindings/python (unless PYTHONPATH already provides
one) and counts every call into libNVFP4 so that test_zz_abi_coverage.py can
check that the suite exercised each exported function. The fixture
`passed_pointers` records the DLTensor.data (+ byte_offset) of every DLTensor
argument actually handed to the library, which the zero-copy tests compare
with the callers' data_ptr()."""
import collections
import ctypes
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

import nvfp4  # noqa: E402
from nvfp4 import _capi  # noqa: E402

CALLS = collections.Counter()
_RECORD = []  # stack of lists; while non-empty, calls are appended to the top one


def _dl_data(arg):
    """Address of the data a DLTensor* argument describes, else None."""
    if isinstance(arg, ctypes._Pointer) and arg._type_ is _capi.DLTensor and arg:
        t = arg.contents
        return (t.data or 0) + t.byte_offset
    t = getattr(arg, "_obj", None)  # ctypes.byref(tensor), as the wrappers pass them
    if isinstance(t, _capi.DLTensor):
        return (t.data or 0) + t.byte_offset
    return None


def _install_counters():
    lib = _capi.get()
    for name in list(_capi.PROTOTYPES) + [n for n in _capi.OPTIONAL_PROTOTYPES if hasattr(lib, n)]:
        fn = getattr(lib, name)

        def counted(*args, _fn=fn, _name=name):
            CALLS[_name] += 1
            if _RECORD:
                _RECORD[-1].append((_name, [_dl_data(a) for a in args]))
            return _fn(*args)

        counted.restype, counted.argtypes = fn.restype, fn.argtypes
        setattr(lib, name, counted)


_install_counters()


class PassedPointers(list):
    """(function name, [data address or None per argument]) for each call."""

    def of(self, name):
        """The argument addresses of the only call to `name` recorded."""
        calls = [ptrs for n, ptrs in self if n == name]
        assert len(calls) == 1, f"{name} called {len(calls)} times: {self}"
        return calls[0]

    def clear(self):
        del self[:]


@pytest.fixture
def passed_pointers():
    rec = PassedPointers()
    _RECORD.append(rec)
    yield rec
    _RECORD.remove(rec)


@pytest.fixture
def rng():
    import numpy as np
    return np.random.default_rng(1234)


@pytest.fixture
def session():
    s = nvfp4.Session()
    yield s
    import gc
    gc.collect()
    s.close()
