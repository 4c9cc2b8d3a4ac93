"""Stateless NVFP4 / NF4 / MXFP4 operations, training helpers.

Every tensor argument may be a NumPy array or any object with __dlpack__
(a PyTorch tensor, on the CPU or a CUDA device); nothing is copied. Results
are new NumPy arrays, or new PyTorch tensors on the device when an input is
a PyTorch CUDA tensor (the call runs on the GPU), or the caller's out=
arrays/tensors written in place and returned as given.
Float outputs: dtype='float32' (default), 'float16' or 'bfloat16' (a uint16
NumPy array holding bf16 bits).
"""
import ctypes

from . import _capi
from ._dlpack import Args, pointer_or_none, ptr_or_none
from .errors import check

_LAYOUTS = {"linear": _capi.SCALE_LINEAR, "swizzled": _capi.SCALE_SWIZZLED}
_PATHS = {"auto": 0, "kernel_only": 1, "kernel_or_fallback": 2, "dequant_matmul_only": 3}
_BACKENDS = {"auto": 0, "nvfp4_kernel": 1, "nf4_kernel": 2, "dequant_matmul": 3}
_TARGETS = {"auto": 0, "cpu": 1, "cuda": 2}
_MATH = {"exact": 0, "fast": 1}


def _enum(value, table, what):
    if isinstance(value, str):
        try:
            return table[value.lower()]
        except KeyError:
            raise ValueError(f"{what} must be one of {sorted(table)}, got {value!r}") from None
    return int(value)


def layout_code(layout):
    return _enum(layout, _LAYOUTS, "layout")


def options(compute_path=None, backend=None, target=None, device_id=None, math_mode=None, num_threads=None,
            stream=None):
    """A Q4_op_options (Q4_op_options_init defaults, then the given fields).
    Enum fields take the Q4_* integers or names: compute_path 'auto' |
    'kernel_only' | 'kernel_or_fallback' | 'dequant_matmul_only'; backend
    'auto' | 'nvfp4_kernel' | 'nf4_kernel' | 'dequant_matmul'; target
    'auto' | 'cpu' | 'cuda'; math_mode 'exact' | 'fast'."""
    o = _capi.Q4_op_options()
    o.struct_size = ctypes.sizeof(o)
    check(_capi.get().Q4_op_options_init(ctypes.byref(o)), "Q4_op_options_init")
    if compute_path is not None:
        o.compute_path = _enum(compute_path, _PATHS, "compute_path")
    if backend is not None:
        o.backend = _enum(backend, _BACKENDS, "backend")
    if target is not None:
        o.target = _enum(target, _TARGETS, "target")
    if device_id is not None:
        o.device_id = int(device_id)
    if math_mode is not None:
        o.math_mode = _enum(math_mode, _MATH, "math_mode")
    if num_threads is not None:
        o.num_threads = int(num_threads)
    if stream is not None:
        o.stream = stream
    return o


def _opts(opts):
    if opts is None:
        return None
    if isinstance(opts, dict):
        opts = options(**opts)
    return ctypes.byref(opts)


def _roundup(v, m):
    return (v + m - 1) // m * m


def _rows_k(x):
    shape = x.shape
    if not shape:
        return 0, 0
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return rows, shape[-1]


def scale_shape(rows, k, layout="linear"):
    """Shape of the uint8 block-scale tensor of a [rows, k] NVFP4 weight."""
    if layout_code(layout) == _capi.SCALE_SWIZZLED:
        return (_roundup(rows, 128), _roundup(k // 16, 4))
    return (rows, k // 16)


# ------------------------------------------------------------------ NVFP4
def nvfp4_quantize(x, global_scale=0.0, *, layout="linear", qdata=None, scale=None, options=None):
    """x [..., K] float (K % 16 == 0) -> (qdata uint8 [rows, K/2], scale uint8
    (scale_shape), global_scale used). global_scale 0 computes amax/(6*448)."""
    with Args() as a:
        bx = a.add(x, "x")
        rows, k = _rows_k(bx)
        lay = layout_code(layout)
        bq = a.out(qdata, "qdata", (rows, k // 2), _u8())
        bs = a.out(scale, "scale", scale_shape(rows, k, lay), _u8())
        g = ctypes.c_float(0.0)
        check(_capi.get().NVFP4_quantize(bx.ptr, bq.ptr, bs.ptr, lay, float(global_scale), ctypes.byref(g),
                                         _opts(options)), "NVFP4_quantize")
        return bq.obj, bs.obj, g.value


def nvfp4_dequantize(qdata, scale, global_scale, *, shape=None, k=None, layout="linear", out=None,
                     dtype="float32", options=None):
    """qdata + scale -> out [..., K]. The shape comes from out=, shape=, k=
    (rows from the byte count) or, by default, qdata's [..., K/2] shape."""
    with Args() as a:
        bq = a.add(qdata, "qdata")
        bs = a.add(scale, "scale")
        if out is None:
            if shape is None:
                if k is not None:
                    shape = (bq.nbytes * 2 // int(k), int(k))
                else:
                    shape = bq.shape[:-1] + (bq.shape[-1] * 2,)
        bo = a.out(out, "out", shape, dtype)
        check(_capi.get().NVFP4_dequantize(bq.ptr, bs.ptr, layout_code(layout), float(global_scale), bo.ptr,
                                           _opts(options)), "NVFP4_dequantize")
        return bo.obj


def nvfp4_linear(x, qdata, scale, global_scale, bias=None, *, layout="linear", out=None, dtype="float32",
                 options=None):
    """out[..., N] = x[..., K] . dequant(W)[N, K]^T (+ bias); N from qdata's bytes."""
    with Args() as a:
        bx = a.add(x, "x")
        bq = a.add(qdata, "qdata")
        bs = a.add(scale, "scale")
        bb = a.add(bias, "bias", allow_none=True)
        k = bx.shape[-1] if bx.shape else 0
        n = bq.nbytes * 2 // k if k else 0
        bo = a.out(out, "out", bx.shape[:-1] + (n,), dtype)
        check(_capi.get().NVFP4_linear(bx.ptr, bq.ptr, bs.ptr, layout_code(layout), float(global_scale),
                                       ptr_or_none(bb), bo.ptr, _opts(options)), "NVFP4_linear")
        return bo.obj


def nvfp4_scaled_mm(a_qdata, a_scale, b_qdata, b_scale, alpha=1.0, bias=None, *, k=None, layout="linear",
                    out=None, dtype="float32", options=None):
    """out[M, N] = alpha * dequant(A)[M, K] . dequant(B)[N, K]^T (+ bias), block
    scales only (fold global scales into alpha). K defaults to 2 * A's last dim."""
    with Args() as a:
        ba, bsa = a.add(a_qdata, "a_qdata"), a.add(a_scale, "a_scale")
        bb, bsb = a.add(b_qdata, "b_qdata"), a.add(b_scale, "b_scale")
        bbias = a.add(bias, "bias", allow_none=True)
        if out is None:
            k = int(k) if k is not None else ba.shape[-1] * 2
            bo = a.out(None, "out", (ba.nbytes * 2 // k, bb.nbytes * 2 // k), dtype)
        else:
            bo = a.add(out, "out", output=True)
        check(_capi.get().NVFP4_scaled_mm(ba.ptr, bsa.ptr, bb.ptr, bsb.ptr, layout_code(layout), float(alpha),
                                          ptr_or_none(bbias), bo.ptr, _opts(options)), "NVFP4_scaled_mm")
        return bo.obj


# ------------------------------------------------------------------ MXFP4
def mxfp4_scale_shape(rows, k, layout="linear"):
    """Shape of the uint8 E8M0 scale tensor of a [rows, k] MXFP4 weight."""
    if layout_code(layout) == _capi.SCALE_SWIZZLED:
        return (_roundup(rows, 128), _roundup(k // 32, 4))
    return (rows, k // 32)


def mxfp4_quantize(x, *, layout="linear", qdata=None, scale=None, options=None):
    """x [..., K] float (K % 32 == 0) -> (qdata uint8 [rows, K/2], E8M0 scale
    uint8 (mxfp4_scale_shape)), the OCP rule (docs/formats.md, MXFP4)."""
    with Args() as a:
        bx = a.add(x, "x")
        rows, k = _rows_k(bx)
        lay = layout_code(layout)
        bq = a.out(qdata, "qdata", (rows, k // 2), _u8())
        bs = a.out(scale, "scale", mxfp4_scale_shape(rows, k, lay), _u8())
        check(_capi.get().MXFP4_quantize(bx.ptr, bq.ptr, bs.ptr, lay, _opts(options)), "MXFP4_quantize")
        return bq.obj, bs.obj


def mxfp4_dequantize(qdata, scale, *, shape=None, layout="linear", out=None, dtype="float32", options=None):
    """qdata + E8M0 scale -> out [..., K]; shape defaults to qdata's [..., K/2]."""
    with Args() as a:
        bq = a.add(qdata, "qdata")
        bs = a.add(scale, "scale")
        if out is None and shape is None:
            shape = bq.shape[:-1] + (bq.shape[-1] * 2,)
        bo = a.out(out, "out", shape, dtype)
        check(_capi.get().MXFP4_dequantize(bq.ptr, bs.ptr, layout_code(layout), bo.ptr, _opts(options)),
              "MXFP4_dequantize")
        return bo.obj


def mxfp4_linear(x, qdata, scale, bias=None, *, layout="linear", out=None, dtype="float32", options=None):
    """out[..., N] = x[..., K] . dequant(W)[N, K]^T (+ bias); N from qdata's bytes."""
    with Args() as a:
        bx = a.add(x, "x")
        bq = a.add(qdata, "qdata")
        bs = a.add(scale, "scale")
        bb = a.add(bias, "bias", allow_none=True)
        k = bx.shape[-1] if bx.shape else 0
        n = bq.nbytes * 2 // k if k else 0
        bo = a.out(out, "out", bx.shape[:-1] + (n,), dtype)
        check(_capi.get().MXFP4_linear(bx.ptr, bq.ptr, bs.ptr, layout_code(layout), ptr_or_none(bb), bo.ptr,
                                       _opts(options)), "MXFP4_linear")
        return bo.obj


def mxfp4_scaled_mm(a_qdata, a_scale, b_qdata, b_scale, alpha=1.0, bias=None, *, k=None, layout="linear",
                    out=None, dtype="float32", options=None):
    """out[M, N] = alpha * dequant(A)[M, K] . dequant(B)[N, K]^T (+ bias), MXFP4
    operands. K defaults to 2 * A's last dim."""
    with Args() as a:
        ba, bsa = a.add(a_qdata, "a_qdata"), a.add(a_scale, "a_scale")
        bb, bsb = a.add(b_qdata, "b_qdata"), a.add(b_scale, "b_scale")
        bbias = a.add(bias, "bias", allow_none=True)
        if out is None:
            k = int(k) if k is not None else ba.shape[-1] * 2
            bo = a.out(None, "out", (ba.nbytes * 2 // k, bb.nbytes * 2 // k), dtype)
        else:
            bo = a.add(out, "out", output=True)
        check(_capi.get().MXFP4_scaled_mm(ba.ptr, bsa.ptr, bb.ptr, bsb.ptr, layout_code(layout), float(alpha),
                                          ptr_or_none(bbias), bo.ptr, _opts(options)), "MXFP4_scaled_mm")
        return bo.obj


def mxfp4_linear_experts(x, qdata, scale, experts, group_rows, bias=None, *, layout="linear", out=None,
                         dtype="float32", options=None):
    """Batched MoE experts (MXFP4_linear_experts): qdata [E, N, K/2] (or the
    gpt-oss [E, N, K/32, 16]) and scale [E, N, K/32] as the checkpoint stores
    them (no copy); x [T, K] is split into consecutive groups of group_rows[g]
    rows, group g running expert experts[g]; bias None or [E, N]. Returns
    out [T, N]."""
    experts = [int(e) for e in experts]
    group_rows = [int(r) for r in group_rows]
    if len(experts) != len(group_rows):
        raise ValueError(f"experts and group_rows differ in length ({len(experts)} vs {len(group_rows)})")
    n_groups = len(experts)
    ex = (ctypes.c_int32 * max(n_groups, 1))(*experts)
    rows = (ctypes.c_int64 * max(n_groups, 1))(*group_rows)
    with Args() as a:
        bx = a.add(x, "x")
        bq = a.add(qdata, "qdata")
        bs = a.add(scale, "scale")
        bb = a.add(bias, "bias", allow_none=True)
        k = bx.shape[-1] if bx.shape else 0
        e_count = bq.shape[0] if bq.shape else 0
        n = bq.nbytes * 2 // (k * e_count) if k and e_count else 0
        bo = a.out(out, "out", bx.shape[:-1] + (n,), dtype)
        check(_capi.get().MXFP4_linear_experts(bx.ptr, bq.ptr, bs.ptr, layout_code(layout), ex, rows, n_groups,
                                               ptr_or_none(bb), bo.ptr, _opts(options)), "MXFP4_linear_experts")
        return bo.obj


def swizzle_scales(linear, out=None):
    """Linear [rows, C] scale bytes -> swizzled [roundup(rows,128), roundup(C,4)]."""
    with Args() as a:
        bl = a.add(linear, "linear")
        rows, c = bl.shape if len(bl.shape) == 2 else (_rows_k(bl))
        bo = a.out(out, "swizzled", (_roundup(rows, 128), _roundup(c, 4)), _u8())
        check(_capi.get().NVFP4_swizzle_scales(bl.ptr, bo.ptr), "NVFP4_swizzle_scales")
        return bo.obj


def unswizzle_scales(swizzled, shape=None, out=None):
    """Swizzled scale bytes -> linear [rows, C] (shape= or out= gives rows, C)."""
    if out is None and shape is None:
        raise TypeError("unswizzle_scales needs shape=(rows, C) or out=")
    with Args() as a:
        bs = a.add(swizzled, "swizzled")
        bo = a.out(out, "linear", shape, _u8())
        check(_capi.get().NVFP4_unswizzle_scales(bs.ptr, bo.ptr), "NVFP4_unswizzle_scales")
        return bo.obj


def swizzled_scale_size(rows, k):
    """Byte size of the swizzled scales of a [rows, k] weight."""
    n = ctypes.c_int64()
    check(_capi.get().NVFP4_swizzled_scale_size(int(rows), int(k), ctypes.byref(n)), "NVFP4_swizzled_scale_size")
    return n.value


# ------------------------------------------------------------------ NF4
class NF4State:
    """NF4 statistics of one tensor (bitsandbytes QuantState): absmax fp32
    [nblocks] (or uint8 codes with nested_absmax), optional quant_map fp32[16],
    optional double quantization (nested_absmax, nested_quant_map fp32[256],
    nested_offset, nested_blocksize; 0 means 256)."""

    def __init__(self, absmax, blocksize=64, quant_map=None, nested_absmax=None, nested_quant_map=None,
                 nested_offset=0.0, nested_blocksize=0):
        self.absmax = absmax
        self.blocksize = blocksize
        self.quant_map = quant_map
        self.nested_absmax = nested_absmax
        self.nested_quant_map = nested_quant_map
        self.nested_offset = nested_offset
        self.nested_blocksize = nested_blocksize

    def _struct(self, args):
        s = _capi.NF4_state()
        s.struct_size = ctypes.sizeof(s)
        s.blocksize = int(self.blocksize)
        s.absmax = args.add(self.absmax, "absmax").pointer
        s.quant_map = pointer_or_none(args.add(self.quant_map, "quant_map", allow_none=True))
        s.nested_absmax = pointer_or_none(args.add(self.nested_absmax, "nested_absmax", allow_none=True))
        s.nested_quant_map = pointer_or_none(args.add(self.nested_quant_map, "nested_quant_map", allow_none=True))
        s.nested_offset = float(self.nested_offset)
        s.nested_blocksize = int(self.nested_blocksize)
        return s


def nf4_quantize(x, blocksize=64, *, qdata=None, absmax=None, options=None):
    """x (any shape, n elements) -> (qdata uint8 [ceil(n/2)], NF4State with
    absmax fp32 [ceil(n/blocksize)]). Element 2j is the HIGH nibble."""
    with Args() as a:
        bx = a.add(x, "x")
        n = bx.numel
        bs = int(blocksize) or 64
        bq = a.out(qdata, "qdata", ((n + 1) // 2,), _u8())
        ba = a.out(absmax, "absmax", (-(-n // bs),), "float32")
        check(_capi.get().NF4_quantize(bx.ptr, bq.ptr, ba.ptr, int(blocksize), _opts(options)), "NF4_quantize")
        return bq.obj, NF4State(ba.obj, bs)


def nf4_double_quantize(absmax, *, options=None):
    """absmax fp32 [nblocks] -> (qabsmax uint8 [nblocks], nested_absmax fp32
    [ceil(nblocks/256)], nested_quant_map fp32 [256], offset)."""
    with Args() as a:
        ba = a.add(absmax, "absmax")
        nb = ba.numel
        bq = a.out(None, "qabsmax", (nb,), _u8())
        bn = a.out(None, "nested_absmax", (-(-nb // 256),), "float32")
        bm = a.out(None, "nested_quant_map", (256,), "float32")
        off = ctypes.c_float()
        check(_capi.get().NF4_double_quantize(ba.ptr, bq.ptr, bn.ptr, bm.ptr, ctypes.byref(off), _opts(options)),
              "NF4_double_quantize")
        return bq.obj, bn.obj, bm.obj, off.value


def nf4_double_quantized_state(state):
    """The NF4State with its absmax double-quantized (NF4_double_quantize)."""
    q, nested, qmap, offset = nf4_double_quantize(state.absmax)
    return NF4State(q, state.blocksize, state.quant_map, nested, qmap, offset, 256)


def nf4_dequantize(qdata, state, shape=None, *, out=None, dtype="float32", options=None):
    """qdata + NF4State -> out (shape= or out=; default 2 * qdata bytes elements)."""
    with Args() as a:
        bq = a.add(qdata, "qdata")
        st = state._struct(a)
        if out is None and shape is None:
            shape = (bq.nbytes * 2,)
        bo = a.out(out, "out", shape, dtype)
        check(_capi.get().NF4_dequantize(bq.ptr, ctypes.byref(st), bo.ptr, _opts(options)), "NF4_dequantize")
        return bo.obj


def nf4_scaled_mm(x, qdata, state, bias=None, *, n=None, out=None, dtype="float32", options=None):
    """out[..., N] = x[..., K] . dequant(W)[N, K]^T (+ bias), W the NF4 tensor of
    N*K elements (N defaults to 2 * qdata bytes / K)."""
    with Args() as a:
        bx = a.add(x, "x")
        bq = a.add(qdata, "qdata")
        st = state._struct(a)
        bb = a.add(bias, "bias", allow_none=True)
        k = bx.shape[-1] if bx.shape else 0
        n = int(n) if n is not None else (bq.nbytes * 2 // k if k else 0)
        bo = a.out(out, "out", bx.shape[:-1] + (n,), dtype)
        check(_capi.get().NF4_scaled_mm(bx.ptr, bq.ptr, ctypes.byref(st), ptr_or_none(bb), bo.ptr,
                                        _opts(options)), "NF4_scaled_mm")
        return bo.obj


# ------------------------------------------------------------------ training helpers
def fake_quantize(x, global_scale=0.0, *, out=None, dtype=None, options=None):
    """dequantize(quantize(x)) in one call -> (out, global_scale used).
    Without out= and dtype=, out has x's dtype (NumPy float32/float16)."""
    with Args() as a:
        bx = a.add(x, "x")
        if dtype is None:
            dt = bx.tensor.dtype
            dtype = "bfloat16" if dt.code == _capi.kDLBfloat else ("float16" if dt.bits == 16 else "float32")
        bo = a.out(out, "out", bx.shape, dtype)
        g = ctypes.c_float()
        check(_capi.get().NVFP4_fake_quantize(bx.ptr, bo.ptr, float(global_scale), ctypes.byref(g),
                                              _opts(options)), "NVFP4_fake_quantize")
        return bo.obj, g.value


def linear_backward(grad_y, x, qdata, scale, global_scale, *, layout="linear", grad_x=True, grad_w=True,
                    dtype="float32", options=None):
    """Straight-through backward of nvfp4_linear: grad_x[M,K] = grad_y[M,N] .
    dequant(W)[N,K], grad_w[N,K] = grad_y^T . x. grad_x / grad_w: True
    (allocate), False/None (skip) or an array to write. x may be None when
    grad_w is skipped. Returns (grad_x, grad_w), None for skipped ones."""
    with Args() as a:
        bg = a.add(grad_y, "grad_y")
        bx = a.add(x, "x", allow_none=True)
        bq = a.add(qdata, "qdata")
        bs = a.add(scale, "scale")
        m, n = _rows_k(bg)
        k = bq.nbytes * 2 // n if n else 0
        bgx = bgw = None
        if grad_x is not None and grad_x is not False:
            bgx = a.out(None if grad_x is True else grad_x, "grad_x", (m, k), dtype)
        if grad_w is not None and grad_w is not False:
            bgw = a.out(None if grad_w is True else grad_w, "grad_w", (n, k), dtype)
        check(_capi.get().NVFP4_linear_backward(bg.ptr, ptr_or_none(bx), bq.ptr, bs.ptr, layout_code(layout),
                                                float(global_scale), ptr_or_none(bgx), ptr_or_none(bgw),
                                                _opts(options)), "NVFP4_linear_backward")
        return (bgx.obj if bgx else None), (bgw.obj if bgw else None)


def _u8():
    import numpy as np
    return np.dtype(np.uint8)
