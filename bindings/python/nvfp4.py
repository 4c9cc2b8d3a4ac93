"""ctypes binding of libNVFP4 (NumPy arrays in, DLPack descriptors across).

    import numpy as np, nvfp4
    lib = nvfp4.Library()                      # finds libNVFP4.so (NVFP4_LIBRARY overrides)
    q, s, g = lib.nvfp4_quantize(w)            # w: float32/float16 [N, K], K % 16 == 0
    y = lib.nvfp4_linear(x, q, s, g)           # x: [..., K] -> y: [..., N] float32
    w2 = lib.nvfp4_dequantize(q, s, g, k=w.shape[1])

Errors raise nvfp4.Error with the library's message (function, argument,
expected and actual). The ABI version is checked when the library loads.
"""
import ctypes
import ctypes.util
import os

import numpy as np

ABI_VERSION = 1

kDLCPU = 1
kDLUInt, kDLFloat, kDLBfloat = 1, 2, 4
Q4_SCALE_LINEAR, Q4_SCALE_SWIZZLED = 0, 1


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class Error(RuntimeError):
    def __init__(self, status, message):
        super().__init__(f"{message} (status {status})")
        self.status = status


_DTYPES = {
    np.dtype(np.float32): (kDLFloat, 32),
    np.dtype(np.float16): (kDLFloat, 16),
    np.dtype(np.uint8): (kDLUInt, 8),
}


def _describe(array):
    """A DLTensor borrowing a C-contiguous NumPy array (kept alive by the caller)."""
    if not array.flags["C_CONTIGUOUS"]:
        raise ValueError("arrays must be C-contiguous")
    code, bits = _DTYPES[array.dtype]
    shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
    t = DLTensor()
    t.data = array.ctypes.data
    t.device = DLDevice(kDLCPU, 0)
    t.ndim = array.ndim
    t.dtype = DLDataType(code, bits, 1)
    t.shape = shape
    t.strides = None
    t.byte_offset = 0
    t._keep = (array, shape)  # noqa: SLF001 - keep the shape buffer alive
    return t


class Library:
    def __init__(self, path=None):
        path = path or os.environ.get("NVFP4_LIBRARY") or ctypes.util.find_library("NVFP4") or "libNVFP4.so.1"
        self._lib = ctypes.CDLL(path)
        L = self._lib
        L.Q4_abi_version.restype = ctypes.c_int32
        if L.Q4_abi_version() != ABI_VERSION:
            raise Error(-1, f"libNVFP4 ABI {L.Q4_abi_version()} != binding ABI {ABI_VERSION}")
        L.Q4_last_error.restype = ctypes.c_char_p
        L.Q4_version_string.restype = ctypes.c_char_p
        P = ctypes.POINTER(DLTensor)
        L.NVFP4_quantize.argtypes = [P, P, P, ctypes.c_int32, ctypes.c_float, ctypes.POINTER(ctypes.c_float), ctypes.c_void_p]
        L.NVFP4_dequantize.argtypes = [P, P, ctypes.c_int32, ctypes.c_float, P, ctypes.c_void_p]
        L.NVFP4_linear.argtypes = [P, P, P, ctypes.c_int32, ctypes.c_float, P, P, ctypes.c_void_p]
        for f in (L.NVFP4_quantize, L.NVFP4_dequantize, L.NVFP4_linear):
            f.restype = ctypes.c_int32

    @property
    def version(self):
        return self._lib.Q4_version_string().decode()

    def _check(self, status):
        if status != 0:
            raise Error(status, self._lib.Q4_last_error().decode())

    def nvfp4_quantize(self, x, global_scale=0.0, layout=Q4_SCALE_LINEAR):
        x = np.ascontiguousarray(x)
        rows, k = int(np.prod(x.shape[:-1])), x.shape[-1]
        q = np.empty((rows, k // 2), np.uint8)
        s = np.empty((rows, k // 16), np.uint8)
        g = ctypes.c_float(0.0)
        tx, tq, ts = _describe(x), _describe(q), _describe(s)
        self._check(self._lib.NVFP4_quantize(ctypes.byref(tx), ctypes.byref(tq), ctypes.byref(ts), layout,
                                             global_scale, ctypes.byref(g), None))
        return q, s, g.value

    def nvfp4_dequantize(self, q, s, global_scale, k, layout=Q4_SCALE_LINEAR):
        out = np.empty((q.size * 2 // k, k), np.float32)
        tq, ts, to = _describe(q), _describe(s), _describe(out)
        self._check(self._lib.NVFP4_dequantize(ctypes.byref(tq), ctypes.byref(ts), layout, global_scale,
                                               ctypes.byref(to), None))
        return out

    def nvfp4_linear(self, x, q, s, global_scale, bias=None, layout=Q4_SCALE_LINEAR):
        x = np.ascontiguousarray(x)
        n = q.shape[0]
        out = np.empty(x.shape[:-1] + (n,), np.float32)
        tx, tq, ts, to = _describe(x), _describe(q), _describe(s), _describe(out)
        tb = _describe(np.ascontiguousarray(bias, np.float32)) if bias is not None else None
        self._check(self._lib.NVFP4_linear(ctypes.byref(tx), ctypes.byref(tq), ctypes.byref(ts), layout,
                                           global_scale, ctypes.byref(tb) if tb is not None else None,
                                           ctypes.byref(to), None))
        return out
