"""The Python (ctypes) binding against NumPy: quantize, dequantize, linear,
error reporting. Exit code 77 (reported as skipped) when NumPy is missing."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bindings", "python"))
try:
    import numpy as np
except ImportError:
    print("SKIPPED: numpy not installed")
    sys.exit(77)

import nvfp4  # noqa: E402

lib = nvfp4.Library()
rng = np.random.default_rng(0)
w = (0.02 * rng.standard_normal((64, 256))).astype(np.float32)
x = rng.standard_normal((3, 5, 256)).astype(np.float32)
q, s, g = lib.nvfp4_quantize(w)
assert q.shape == (64, 128) and s.shape == (64, 16) and g > 0
wd = lib.nvfp4_dequantize(q, s, g, k=256)
rel = np.linalg.norm(wd - w) / np.linalg.norm(w)
assert rel < 0.12, rel
y = lib.nvfp4_linear(x, q, s, g, bias=np.arange(64, dtype=np.float32))
ref = x.astype(np.float64) @ wd.astype(np.float64).T + np.arange(64)
assert y.shape == (3, 5, 64)
assert np.max(np.abs(y - ref)) <= 1e-4 * (1 + np.max(np.abs(ref))), np.max(np.abs(y - ref))
try:
    lib.nvfp4_quantize(np.zeros((2, 24), np.float32))
    raise AssertionError("K % 16 != 0 must fail")
except nvfp4.Error as e:
    assert "multiple of 16" in str(e), e
bad = np.ones((1, 16), np.float32)
bad[0, 3] = np.nan
try:
    lib.nvfp4_quantize(bad)
    raise AssertionError("NaN must fail")
except nvfp4.Error as e:
    assert "flat index 3" in str(e), e
print(f"python binding ok: libNVFP4 {lib.version}, weight rel-RMS {rel:.4f}")
