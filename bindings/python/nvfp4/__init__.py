"""Python binding of libNVFP4 (ctypes; NumPy and DLPack tensors, zero-copy).

    import numpy as np, nvfp4
    q, s, g = nvfp4.nvfp4_quantize(w)              # w: float32/float16 [N, K], K % 16 == 0
    y = nvfp4.nvfp4_linear(x, q, s, g)             # x: [..., K] -> y: [..., N] float32
    w2 = nvfp4.nvfp4_dequantize(q, s, g)           # -> [N, K] float32

The library is found through $NVFP4_LIBRARY, then a libNVFP4.so* next to
this package, then <prefix>/lib/libNVFP4.so.1 of the prefix the package is
installed in, then the system loader; its ABI version is checked on load.
Failures raise nvfp4.Error subclasses (one per Q4_ERR_* status) carrying the
status, Q4_status_string and Q4_last_error(). See docs/bindings.md.
"""
from . import _capi
from ._capi import (ABI_VERSION, BACKEND_AUTO, BACKEND_DEQUANT_MATMUL, BACKEND_NF4_KERNEL, BACKEND_NVFP4_KERNEL,
                    FORMAT_MIXED, FORMAT_MXFP4, FORMAT_NF4, FORMAT_NONE, FORMAT_NVFP4, LOG_DEBUG, LOG_ERROR, LOG_INFO, LOG_OFF,
                    LOG_WARN, MANAGED_PREFETCH, MANAGED_READ_MOSTLY, MANAGED_REPORT_MANAGED, PATH_AUTO,
                    PATH_DEQUANT_MATMUL_ONLY, PATH_KERNEL_ONLY, PATH_KERNEL_OR_FALLBACK, PROTOTYPES, SCALE_LINEAR,
                    SCALE_SWIZZLED, LibraryError)
from ._dlpack import BFloat16, Float4, Tensor, from_bfloat16, to_bfloat16
from .checkpoint import Checkpoint, CheckpointWriter, TensorInfo
from .errors import *  # noqa: F401,F403 - the Error hierarchy
from .errors import ERRORS, Error
from .ops import (NF4State, fake_quantize, linear_backward, mxfp4_dequantize, mxfp4_linear, mxfp4_linear_experts,
                  mxfp4_quantize, mxfp4_scale_shape, mxfp4_scaled_mm, nf4_dequantize, nf4_double_quantize,
                  nf4_double_quantized_state, nf4_quantize, nf4_scaled_mm, nvfp4_dequantize, nvfp4_linear,
                  nvfp4_quantize, nvfp4_scaled_mm, options, scale_shape, swizzle_scales, swizzled_scale_size,
                  unswizzle_scales)
from .schema import LinearSchema, SchemaSummary, detect_linears, detect_schema, dtype_name, format_name, schema_name
from .session import Linear, LinearInfo, MutableTensor, Session, SessionStats, Snapshot, WeightBundle
from .system import (Capabilities, TuneResult, abi_version, can_use_managed, capabilities, clear_error,
                     cuda_synchronize, empty_cache, get_log_level, is_managed_tensor, isa_name, last_error, last_isa_used,
                     library_path, managed_prefetch, memory_info, set_log_callback, set_log_level, set_max_isa,
                     status_string, to_managed, tune_matmul, version, version_string)

__version__ = "0.1.0"


def bfloat16(array):
    """Marks a NumPy uint16 array as bfloat16 storage (input or out=)."""
    return BFloat16(array)


def float4(array):
    """Marks a uint8 array [..., K/2] of packed E2M1 pairs as float4_e2m1fn [..., K]."""
    return Float4(array)


def load_library(path=None):
    """Loads (or re-points the binding at) libNVFP4 explicitly; returns the ctypes handle."""
    lib = _capi.load(path)
    _capi._lib = lib
    return lib


class Library:
    """Compatibility with the former single-file binding (nvfp4.py)."""

    def __init__(self, path=None):
        self._lib = load_library(path) if path else _capi.get()

    @property
    def version(self):
        return version_string()

    def nvfp4_quantize(self, x, global_scale=0.0, layout=SCALE_LINEAR):
        return nvfp4_quantize(x, global_scale, layout=layout)

    def nvfp4_dequantize(self, q, s, global_scale, k, layout=SCALE_LINEAR):
        return nvfp4_dequantize(q, s, global_scale, k=k, layout=layout)

    def nvfp4_linear(self, x, q, s, global_scale, bias=None, layout=SCALE_LINEAR):
        return nvfp4_linear(x, q, s, global_scale, bias, layout=layout)
