"""Smoke test of the nvfp4 package against NumPy: quantize, dequantize,
linear, error reporting. Collected by pytest, and runnable as a plain script
(valgrind_python.sh runs it that way; exit 77 when NumPy is missing)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python"))
try:
    import numpy as np
except ImportError:  # pragma: no cover - only reachable when run as a script
    print("SKIPPED: numpy not installed")
    sys.exit(77)

import nvfp4  # noqa: E402


def _weights():
    rng = np.random.default_rng(0)
    w = (0.02 * rng.standard_normal((64, 256))).astype(np.float32)
    x = rng.standard_normal((3, 5, 256)).astype(np.float32)
    return w, x


def _quantize_dequantize_linear():
    w, x = _weights()
    q, s, g = nvfp4.nvfp4_quantize(w)
    assert q.shape == (64, 128) and s.shape == (64, 16) and g > 0
    wd = nvfp4.nvfp4_dequantize(q, s, g)
    rel = np.linalg.norm(wd - w) / np.linalg.norm(w)
    assert rel < 0.12, rel
    y = nvfp4.nvfp4_linear(x, q, s, g, bias=np.arange(64, dtype=np.float32))
    ref = x.astype(np.float64) @ wd.astype(np.float64).T + np.arange(64)
    assert y.shape == (3, 5, 64)
    assert np.max(np.abs(y - ref)) <= 1e-4 * (1 + np.max(np.abs(ref))), np.max(np.abs(y - ref))
    return rel


def test_quantize_dequantize_linear():
    _quantize_dequantize_linear()


def test_legacy_library_object():
    w, _ = _weights()
    lib = nvfp4.Library()
    q, s, g = lib.nvfp4_quantize(w)
    assert np.array_equal(lib.nvfp4_dequantize(q, s, g, k=256), nvfp4.nvfp4_dequantize(q, s, g))
    assert lib.version == nvfp4.version_string()


def test_errors_name_the_problem():
    try:
        nvfp4.nvfp4_quantize(np.zeros((2, 24), np.float32))
        raise AssertionError("K % 16 != 0 must fail")
    except nvfp4.ShapeError as e:
        assert "multiple of 16" in str(e), e
    bad = np.ones((1, 16), np.float32)
    bad[0, 3] = np.nan
    try:
        nvfp4.nvfp4_quantize(bad)
        raise AssertionError("NaN must fail")
    except nvfp4.NonFiniteError as e:
        assert "flat index 3" in str(e), e


if __name__ == "__main__":
    rel = _quantize_dequantize_linear()
    test_legacy_library_object()
    test_errors_name_the_problem()
    print(f"python binding ok: libNVFP4 {nvfp4.version_string()}, weight rel-RMS {rel:.4f}")
