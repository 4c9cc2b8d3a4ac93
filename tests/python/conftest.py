"""pytest setup for the nvfp4 package tests.

Imports the package from bindings/python (unless PYTHONPATH already provides
one) and counts every call into libNVFP4 so that test_zz_abi_coverage.py can
check that the suite exercised each exported function."""
import collections
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

import nvfp4  # noqa: E402
from nvfp4 import _capi  # noqa: E402

CALLS = collections.Counter()


def _install_counters():
    lib = _capi.get()
    for name in list(_capi.PROTOTYPES) + [n for n in _capi.OPTIONAL_PROTOTYPES if hasattr(lib, n)]:
        fn = getattr(lib, name)

        def counted(*args, _fn=fn, _name=name):
            CALLS[_name] += 1
            return _fn(*args)

        counted.restype, counted.argtypes = fn.restype, fn.argtypes
        setattr(lib, name, counted)


_install_counters()


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
