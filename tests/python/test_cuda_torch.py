"""The CUDA path with PyTorch device tensors against the library's CPU results.

Every operation is called twice on the same data: once on NumPy arrays (the
library's CPU code) and once on torch tensors on $NVFP4_TORCH_DEVICE
(default "cuda": plain cudaMalloc memory from PyTorch's allocator, which the
binding hands over as kDLCUDA DLPack tensors, outputs passed as out= tensors
on the same device). Quantize and dequantize must be bit-identical to the
CPU, the products within a relative error |dev - cpu| / (1 + |cpu|) of 1e-4
(1e-3 for the W4A4 products): NVFP4, NF4 and MXFP4 (MoE experts included),
the non-finite input error, and a session's linears. No call may modify an
input tensor (each is cloned first and compared afterwards).

Skips: every test is SKIPPED, with the reason, when torch is missing, or,
for a CUDA device, when torch.cuda.is_available() is False or libNVFP4
reports no usable CUDA device (capabilities().cuda_state, with its
nativeLoadState). NVFP4_TORCH_DEVICE=cpu runs the same checks with torch
CPU tensors (and a CPU session), which verifies the test logic on a machine
without a GPU.
"""
import contextlib
import os

import numpy as np
import pytest

import nvfp4
from nvfp4 import _capi

DEVICE = os.environ.get("NVFP4_TORCH_DEVICE", "cuda")
ON_CUDA = DEVICE.split(":")[0] == "cuda"
if not ON_CUDA and DEVICE != "cpu":
    raise ValueError(f"NVFP4_TORCH_DEVICE must be 'cuda', 'cuda:N' or 'cpu', got {DEVICE!r}")


def _cuda_skip_reason():
    """Why the CUDA checks cannot run here (None when they can)."""
    if not torch.cuda.is_available():
        return (f"torch.cuda.is_available() is False (torch {torch.__version__}, CUDA build "
                f"{torch.version.cuda}); set NVFP4_TORCH_DEVICE=cpu to run these checks on the CPU")
    caps = nvfp4.capabilities()
    if caps.cuda_state != _capi.CUDA_READY:
        return f"libNVFP4 has no usable CUDA device (cuda_state {caps.cuda_state}): {caps.native_load_state}"
    index = torch.device(DEVICE).index or 0
    if index >= min(caps.cuda_device_count, torch.cuda.device_count()):
        return f"{DEVICE} does not exist (libNVFP4 sees {caps.cuda_device_count} CUDA devices)"
    return None


try:
    import torch
except ImportError as e:
    torch = None
    SKIP_REASON = f"torch is not importable ({e}); NVFP4_TORCH_DEVICE={DEVICE}"
else:
    SKIP_REASON = _cuda_skip_reason() if ON_CUDA else None

# Every test is collected and reported SKIPPED (not the module dropped), so
# that test_zz_abi_coverage.py still sees the whole suite run.
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")

DEVICE_ID = (torch.device(DEVICE).index or 0) if ON_CUDA and torch is not None else 0
SESSION_TARGET, TARGET_CODE = ("cuda", _capi.TARGET_CUDA) if ON_CUDA else ("cpu", _capi.TARGET_CPU)

N, K = 256, 512
DTYPES = ["float32", "float16", "bfloat16"]
LAYOUTS = ["linear", "swizzled"]


# ------------------------------------------------------------------ helpers
def sync():
    if ON_CUDA:
        torch.cuda.synchronize()


def host(t):
    """A device tensor's values as a NumPy array (bf16 as its uint16 bits)."""
    sync()
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16).copy()
    return t.numpy().copy()


def to_device(a):
    """A NumPy array (float32/float16/uint8) as a new contiguous tensor on DEVICE."""
    return torch.from_numpy(np.array(a, copy=True, order="C")).to(DEVICE)


def inputs(a, dtype):
    """A float32 array cast to dtype -> (the NumPy argument of the CPU call,
    a device tensor holding the same bits)."""
    if dtype == "bfloat16":
        bits = nvfp4.to_bfloat16(a)
        t = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16).to(DEVICE)
        return nvfp4.bfloat16(bits), t
    arr = np.ascontiguousarray(a, dtype)
    return arr, to_device(arr)


def empty(shape, dtype="float32"):
    """An output tensor on DEVICE, pre-filled so that bytes left unwritten show."""
    tdt = getattr(torch, dtype)
    fill = 0xA5 if tdt == torch.uint8 else float("nan")
    return torch.full(tuple(shape), fill, dtype=tdt, device=DEVICE)


@contextlib.contextmanager
def unchanged(*tensors):
    """Checks that the device inputs of the calls inside are not modified."""
    tensors = [t for t in tensors if t is not None]
    before = [t.clone() for t in tensors]
    yield
    for i, (t, b) in enumerate(zip(tensors, before)):
        assert_identical(host(t), host(b), f"input {i} ({tuple(t.shape)} {t.dtype}) was modified")


def assert_identical(got, expect, what):
    got, expect = np.ascontiguousarray(got), np.ascontiguousarray(expect)
    assert (got.dtype, got.shape) == (expect.dtype, expect.shape), \
        f"{what}: {got.dtype}{got.shape} vs {expect.dtype}{expect.shape}"
    bits = np.dtype(f"u{got.itemsize}")
    g, e = got.view(bits).ravel(), expect.view(bits).ravel()
    bad = np.flatnonzero(g != e)
    assert bad.size == 0, (f"{what}: {bad.size} of {g.size} elements differ, first at flat index {bad[0]}: "
                           f"{int(g[bad[0]]):#x} vs {int(e[bad[0]]):#x}")


def assert_close(got, expect, tol, what="result"):
    """max |got - expect| / (1 + |expect|) <= tol, shapes equal, nothing non-finite."""
    got, expect = np.asarray(got, np.float64), np.asarray(expect, np.float64)
    assert got.shape == expect.shape, f"{what}: shape {got.shape} vs {expect.shape}"
    assert np.all(np.isfinite(got)), f"{what}: {np.count_nonzero(~np.isfinite(got))} non-finite values"
    err = np.abs(got - expect) / (1.0 + np.abs(expect))
    worst = tuple(int(i) for i in np.unravel_index(np.argmax(err), err.shape))
    assert err[worst] <= tol, (f"{what}: relative error {err[worst]:.3g} > {tol} at {worst}: "
                               f"{float(got[worst])!r} vs {float(expect[worst])!r}")


def weight(seed, n=N, k=K):
    return (0.05 * np.random.default_rng(seed).standard_normal((n, k))).astype(np.float32)


def activations(seed, m, k=K):
    return np.random.default_rng(seed).standard_normal((m, k)).astype(np.float32)


def as_float32(a, dtype):
    """A CPU result of dtype (bf16 as uint16 bits) as float32."""
    return nvfp4.from_bfloat16(a) if dtype == "bfloat16" else np.asarray(a, np.float32)


# ------------------------------------------------------------------ NVFP4
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nvfp4_quantize_is_bit_identical(dtype, layout):
    rows = 192  # not a multiple of 128: the swizzled layout has padding rows
    x_cpu, x_dev = inputs(weight(10, rows), dtype)
    q, s, g = nvfp4.nvfp4_quantize(x_cpu, layout=layout)
    qd, sd = empty((rows, K // 2), "uint8"), empty(nvfp4.scale_shape(rows, K, layout), "uint8")
    with unchanged(x_dev):
        rq, rs, gd = nvfp4.nvfp4_quantize(x_dev, layout=layout, qdata=qd, scale=sd)
    assert rq is qd and rs is sd
    assert gd == g
    assert_identical(host(qd), q, "qdata")
    assert_identical(host(sd), s, f"{layout} scales")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nvfp4_dequantize_is_bit_identical(dtype, layout):
    q, s, g = nvfp4.nvfp4_quantize(weight(11), layout=layout)
    expect = nvfp4.nvfp4_dequantize(q, s, g, layout=layout, dtype=dtype)
    qd, sd, out = to_device(q), to_device(s), empty((N, K), dtype)
    with unchanged(qd, sd):
        assert nvfp4.nvfp4_dequantize(qd, sd, g, layout=layout, out=out) is out
    assert_identical(host(out), expect, f"{dtype} dequantized weight")


@pytest.mark.parametrize("m, dtype, with_bias, layout", [
    (1, "float32", False, "linear"),
    (4, "float32", True, "linear"),
    (64, "float32", False, "linear"),
    (64, "bfloat16", True, "swizzled"),
    (4, "float16", False, "swizzled"),
])
def test_nvfp4_linear_matches_cpu(m, dtype, with_bias, layout):
    q, s, g = nvfp4.nvfp4_quantize(weight(12), layout=layout)
    x_cpu, x_dev = inputs(activations(13 + m, m), dtype)
    bias = np.random.default_rng(14).standard_normal(N).astype(np.float32) if with_bias else None
    expect = nvfp4.nvfp4_linear(x_cpu, q, s, g, bias, layout=layout)
    qd, sd = to_device(q), to_device(s)
    bd = to_device(bias) if with_bias else None
    out = empty((m, N))
    with unchanged(x_dev, qd, sd, bd):
        assert nvfp4.nvfp4_linear(x_dev, qd, sd, g, bd, layout=layout, out=out) is out
    assert_close(host(out), expect, 1e-4)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_nvfp4_scaled_mm_matches_cpu(layout):
    m = 32
    qa, sa, ga = nvfp4.nvfp4_quantize(activations(15, m), layout=layout)
    qb, sb, gb = nvfp4.nvfp4_quantize(weight(16), layout=layout)
    alpha = ga * gb
    expect = nvfp4.nvfp4_scaled_mm(qa, sa, qb, sb, alpha, layout=layout)
    dev = [to_device(a) for a in (qa, sa, qb, sb)]
    out = empty((m, N))
    with unchanged(*dev):
        assert nvfp4.nvfp4_scaled_mm(*dev, alpha, layout=layout, out=out) is out
    assert_close(host(out), expect, 1e-3)


# ------------------------------------------------------------------ NF4
@pytest.mark.parametrize("dtype, shape", [
    ("float32", (N, K)),
    ("float16", (N, K)),
    ("bfloat16", (N, K)),
    ("float32", (1001,)),  # odd count: the last byte's low nibble is padding
], ids=["float32", "float16", "bfloat16", "float32-odd-count"])
def test_nf4_quantize_is_bit_identical(dtype, shape):
    x = np.random.default_rng(20).standard_normal(shape).astype(np.float32)
    x_cpu, x_dev = inputs(x, dtype)
    q, st = nvfp4.nf4_quantize(x_cpu, 64)
    n = x.size
    qd, ad = empty(((n + 1) // 2,), "uint8"), empty((-(-n // 64),))
    with unchanged(x_dev):
        rq, rst = nvfp4.nf4_quantize(x_dev, 64, qdata=qd, absmax=ad)
    assert rq is qd and rst.absmax is ad and rst.blocksize == 64
    assert_identical(host(qd), q, "NF4 codes")
    assert_identical(host(ad), st.absmax, "NF4 absmax")


@pytest.mark.parametrize("dtype", DTYPES)
def test_nf4_dequantize_matches_cpu(dtype):
    q, st = nvfp4.nf4_quantize(weight(21), 64)
    expect = nvfp4.nf4_dequantize(q, st, (N, K), dtype=dtype)
    qd, ad, out = to_device(q), to_device(st.absmax), empty((N, K), dtype)
    with unchanged(qd, ad):
        assert nvfp4.nf4_dequantize(qd, nvfp4.NF4State(ad, 64), out=out) is out
    assert_close(as_float32(host(out), dtype), as_float32(expect, dtype), 1e-6)


@pytest.mark.parametrize("m, with_bias", [(1, False), (4, True), (64, False)])
def test_nf4_scaled_mm_matches_cpu(m, with_bias):
    q, st = nvfp4.nf4_quantize(weight(22), 64)
    x = activations(23 + m, m)
    bias = np.random.default_rng(24).standard_normal(N).astype(np.float32) if with_bias else None
    expect = nvfp4.nf4_scaled_mm(x, q, st, bias)
    xd, qd, ad = to_device(x), to_device(q), to_device(st.absmax)
    bd = to_device(bias) if with_bias else None
    out = empty((m, N))
    with unchanged(xd, qd, ad, bd):
        assert nvfp4.nf4_scaled_mm(xd, qd, nvfp4.NF4State(ad, 64), bd, out=out) is out
    assert_close(host(out), expect, 1e-4)


# ------------------------------------------------------------------ MXFP4
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_mxfp4_quantize_is_bit_identical(dtype, layout):
    rows = 192
    x_cpu, x_dev = inputs(weight(30, rows), dtype)
    q, s = nvfp4.mxfp4_quantize(x_cpu, layout=layout)
    qd, sd = empty((rows, K // 2), "uint8"), empty(nvfp4.mxfp4_scale_shape(rows, K, layout), "uint8")
    with unchanged(x_dev):
        rq, rs = nvfp4.mxfp4_quantize(x_dev, layout=layout, qdata=qd, scale=sd)
    assert rq is qd and rs is sd
    assert_identical(host(qd), q, "qdata")
    assert_identical(host(sd), s, f"{layout} E8M0 scales")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_mxfp4_dequantize_is_bit_identical(dtype, layout):
    q, s = nvfp4.mxfp4_quantize(weight(31), layout=layout)
    expect = nvfp4.mxfp4_dequantize(q, s, layout=layout, dtype=dtype)
    qd, sd, out = to_device(q), to_device(s), empty((N, K), dtype)
    with unchanged(qd, sd):
        assert nvfp4.mxfp4_dequantize(qd, sd, layout=layout, out=out) is out
    assert_identical(host(out), expect, f"{dtype} dequantized weight")


@pytest.mark.parametrize("m, dtype, with_bias, layout", [
    (1, "float32", False, "linear"),
    (64, "float32", True, "linear"),
    (64, "bfloat16", False, "swizzled"),
])
def test_mxfp4_linear_matches_cpu(m, dtype, with_bias, layout):
    q, s = nvfp4.mxfp4_quantize(weight(32), layout=layout)
    x_cpu, x_dev = inputs(activations(33 + m, m), dtype)
    bias = np.random.default_rng(34).standard_normal(N).astype(np.float32) if with_bias else None
    expect = nvfp4.mxfp4_linear(x_cpu, q, s, bias, layout=layout)
    qd, sd = to_device(q), to_device(s)
    bd = to_device(bias) if with_bias else None
    out = empty((m, N))
    with unchanged(x_dev, qd, sd, bd):
        assert nvfp4.mxfp4_linear(x_dev, qd, sd, bd, layout=layout, out=out) is out
    assert_close(host(out), expect, 1e-4)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_mxfp4_scaled_mm_matches_cpu(layout):
    m = 32
    qa, sa = nvfp4.mxfp4_quantize(activations(35, m), layout=layout)
    qb, sb = nvfp4.mxfp4_quantize(weight(36), layout=layout)
    expect = nvfp4.mxfp4_scaled_mm(qa, sa, qb, sb, 0.5, layout=layout)
    dev = [to_device(a) for a in (qa, sa, qb, sb)]
    out = empty((m, N))
    with unchanged(*dev):
        assert nvfp4.mxfp4_scaled_mm(*dev, 0.5, layout=layout, out=out) is out
    assert_close(host(out), expect, 1e-3)


@pytest.mark.parametrize("with_bias", [False, True])
def test_mxfp4_linear_experts_matches_per_expert_cpu(with_bias):
    n_experts, experts, group_rows = 3, [2, 0, 2], [3, 0, 5]
    t = sum(group_rows)
    w = np.stack([weight(40 + e) for e in range(n_experts)])  # [E, N, K]
    pairs = [nvfp4.mxfp4_quantize(w[e]) for e in range(n_experts)]
    q = np.stack([p[0] for p in pairs])  # [E, N, K/2]
    s = np.stack([p[1] for p in pairs])  # [E, N, K/32]
    x = activations(45, t)
    bias = np.random.default_rng(46).standard_normal((n_experts, N)).astype(np.float32) if with_bias else None
    expect = np.empty((t, N), np.float32)
    r0 = 0
    for e, rows in zip(experts, group_rows):
        if rows:
            expect[r0:r0 + rows] = nvfp4.mxfp4_linear(x[r0:r0 + rows], q[e], s[e], None if bias is None else bias[e])
        r0 += rows
    xd, qd, sd = to_device(x), to_device(q), to_device(s)
    bd = to_device(bias) if with_bias else None
    out = empty((t, N))
    with unchanged(xd, qd, sd, bd):
        assert nvfp4.mxfp4_linear_experts(xd, qd, sd, experts, group_rows, bd, out=out) is out
    assert_close(host(out), expect, 1e-4)


# ------------------------------------------------------------------ non-finite input
def _quantize(fmt, x):
    """fmt's quantization of x [rows, K]; a torch tensor gets its outputs on DEVICE."""
    rows, on_device = x.shape[0], isinstance(x, torch.Tensor)
    if fmt == "nvfp4":
        outs = dict(qdata=empty((rows, K // 2), "uint8"), scale=empty(nvfp4.scale_shape(rows, K), "uint8"))
        return nvfp4.nvfp4_quantize(x, **(outs if on_device else {}))
    if fmt == "mxfp4":
        outs = dict(qdata=empty((rows, K // 2), "uint8"), scale=empty(nvfp4.mxfp4_scale_shape(rows, K), "uint8"))
        return nvfp4.mxfp4_quantize(x, **(outs if on_device else {}))
    outs = dict(qdata=empty((rows * K // 2,), "uint8"), absmax=empty((rows * K // 64,)))
    return nvfp4.nf4_quantize(x, 64, **(outs if on_device else {}))


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "nf4"])
def test_non_finite_input_is_refused_like_on_the_cpu(fmt):
    x = activations(50, 16)
    bad = (5, 37)
    x[bad] = np.nan
    flat = f"index {bad[0] * K + bad[1]}"
    with pytest.raises(nvfp4.Error) as cpu:
        _quantize(fmt, x)
    assert isinstance(cpu.value, nvfp4.NonFiniteError) and cpu.value.status == 10
    xd = to_device(x)
    with unchanged(xd):
        with pytest.raises(nvfp4.Error) as dev:
            _quantize(fmt, xd)
    assert type(dev.value) is type(cpu.value) and dev.value.status == cpu.value.status, str(dev.value)
    if flat in cpu.value.message:
        assert flat in dev.value.message, (dev.value.message, cpu.value.message)


# ------------------------------------------------------------------ sessions
def _packed(fmt, w):
    """A float weight packed in fmt -> (bias -> its WeightBundle, (x, bias) -> the
    stateless CPU linear on it)."""
    if fmt == "nvfp4":
        q, s, g = nvfp4.nvfp4_quantize(w)
        return (lambda bias: nvfp4.WeightBundle.nvfp4(q, s, g, bias=bias),
                lambda x, bias: nvfp4.nvfp4_linear(x, q, s, g, bias))
    if fmt == "mxfp4":
        q, s = nvfp4.mxfp4_quantize(w)
        return (lambda bias: nvfp4.WeightBundle.mxfp4(q, s, bias=bias),
                lambda x, bias: nvfp4.mxfp4_linear(x, q, s, bias))
    q, st = nvfp4.nf4_quantize(w, 64)
    return (lambda bias: nvfp4.WeightBundle.nf4(q, st, w.shape[0], w.shape[1], bias=bias),
            lambda x, bias: nvfp4.nf4_scaled_mm(x, q, st, bias))


@pytest.mark.parametrize("fmt, with_bias", [("nvfp4", True), ("mxfp4", False), ("nf4", True)])
def test_session_linear_forwards_match_cpu(fmt, with_bias):
    bias = np.random.default_rng(60).standard_normal(N).astype(np.float32) if with_bias else None
    bundle, reference = _packed(fmt, weight(61))
    xs = [activations(62, 1), activations(63, 64)]
    with nvfp4.Session(target=SESSION_TARGET, device_id=DEVICE_ID) as sess:
        with sess.create_linear(bundle(bias)) as lin:
            info = lin.info()
            assert (info.format, info.target, info.out_features, info.in_features) == (fmt, TARGET_CODE, N, K)
            for x in xs:
                xd, out = to_device(x), empty((x.shape[0], N))
                with unchanged(xd):
                    assert lin.forward(xd, out=out) is out
                assert_close(host(out), reference(x, bias), 1e-4, f"{fmt} forward M={x.shape[0]}")
            st = sess.stats()
            assert (st.forwards, st.implicit_copies, st.live_linears) == (2, 0, 1)

            bundle2, reference2 = _packed(fmt, -0.5 * weight(64))
            lin.update_weight(bundle2(bias))
            assert lin.info().weight_version == 2
            x = xs[1]
            xd, out = to_device(x), empty((x.shape[0], N))
            with unchanged(xd):
                lin(xd, out=out)
            got = host(out)
            assert_close(got, reference2(x, bias), 1e-4, f"{fmt} forward after update_weight")
            assert not np.allclose(got, reference(x, bias), atol=1e-2)  # the new weight, not the old one
            st = sess.stats()
            assert (st.forwards, st.implicit_copies) == (3, 0)


# ------------------------------------------------------------------ results without out=
def _on_device(result):
    """A result made by the binding: a torch tensor on DEVICE when the call ran
    on CUDA tensors, a NumPy array for CPU tensors."""
    if ON_CUDA:
        want = torch.device("cuda", DEVICE_ID)  # "cuda" alone compares unequal to "cuda:0"
        assert isinstance(result, torch.Tensor) and result.device == want, \
            f"expected a tensor on {want}, got {type(result).__name__} {getattr(result, 'device', '')}"
        return host(result)
    assert isinstance(result, np.ndarray)
    return result


def test_results_without_out_are_allocated_where_the_call_runs():
    w, x = weight(70), activations(71, 4)
    q, s, g = nvfp4.nvfp4_quantize(w)
    wd, xd = to_device(w), to_device(x)
    with unchanged(wd, xd):
        qd, sd, gd = nvfp4.nvfp4_quantize(wd)
        assert gd == g
        assert_identical(_on_device(qd), q, "qdata")
        assert_identical(_on_device(sd), s, "scale")
        assert_close(_on_device(nvfp4.nvfp4_linear(xd, qd, sd, gd)), nvfp4.nvfp4_linear(x, q, s, g), 1e-4)
        bf = nvfp4.nvfp4_linear(xd, qd, sd, gd, dtype="bfloat16")
        assert_close(nvfp4.from_bfloat16(_on_device(bf)), nvfp4.from_bfloat16(
            nvfp4.nvfp4_linear(x, q, s, g, dtype="bfloat16")), 1e-2)
        mq, ms = nvfp4.mxfp4_quantize(w)
        mqd, msd = nvfp4.mxfp4_quantize(wd)
        assert_identical(_on_device(mqd), mq, "MXFP4 qdata")
        assert_close(_on_device(nvfp4.mxfp4_linear(xd, mqd, msd)), nvfp4.mxfp4_linear(x, mq, ms), 1e-4)
        nq, nst = nvfp4.nf4_quantize(w)
        nqd, nstd = nvfp4.nf4_quantize(wd)
        assert_identical(_on_device(nqd), nq, "NF4 codes")
        assert_identical(_on_device(nstd.absmax), nst.absmax, "NF4 absmax")
    with nvfp4.Session(target=SESSION_TARGET, device_id=DEVICE_ID) as sess:
        with sess.create_linear(nvfp4.WeightBundle.nvfp4(q, s, g)) as lin:
            with unchanged(xd):
                y = lin.forward(xd)
            assert_close(_on_device(y), nvfp4.nvfp4_linear(x, q, s, g), 1e-4)
            assert sess.stats().implicit_copies == 0
