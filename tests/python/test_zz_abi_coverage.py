"""Every exported function is declared in the binding and was called by this
suite (conftest.py counts calls; this module is collected last)."""
import os

import pytest

import nvfp4
from conftest import CALLS, ROOT


def _symbols():
    with open(os.path.join(ROOT, "abi", "libNVFP4.symbols")) as f:
        return {line.strip() for line in f if line.strip() and not line.startswith("#")}


def test_every_exported_symbol_has_a_prototype():
    declared = set(nvfp4.PROTOTYPES) | set(nvfp4._capi.OPTIONAL_PROTOTYPES)
    assert set(nvfp4.PROTOTYPES) <= _symbols() <= declared


def test_every_exported_symbol_was_called(request):
    here = os.path.dirname(os.path.abspath(__file__))
    modules = {f for f in os.listdir(here) if f.startswith("test_") and f.endswith(".py")}
    ran = {os.path.basename(str(item.fspath)) for item in request.session.items}
    if ran != modules or request.config.option.keyword or request.config.option.markexpr:
        pytest.skip("only meaningful when the whole suite runs")
    missing = sorted(_symbols() - set(CALLS))
    assert not missing, f"never called by the tests: {missing}"
