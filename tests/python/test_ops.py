"""Stateless operations against the independent NumPy reference."""
import numpy as np
import pytest

import nvfp4
import nvfp4_reference as ref


def _w(rng, n=48, k=128, scale=0.05):
    return (scale * rng.standard_normal((n, k))).astype(np.float32)


def test_nvfp4_quantize_matches_reference(rng):
    w = _w(rng)
    q, s, g = nvfp4.nvfp4_quantize(w)
    assert q.dtype == np.uint8 and s.dtype == np.uint8
    assert g == pytest.approx(np.abs(w).max() / (6 * 448), rel=1e-6)
    expect = ref.nvfp4_dequantize(q, s, g, 48, 128)
    got = nvfp4.nvfp4_dequantize(q, s, g)
    assert got.shape == (48, 128) and got.dtype == np.float32
    assert np.array_equal(got, expect)
    # the reference decode is within half an E2M1 step of the input
    err = np.abs(expect - w).reshape(48, 8, 16)
    block_scale = np.repeat(ref.e4m3_decode(s).reshape(48, 8, 1), 16, axis=2) * g
    assert np.all(err <= block_scale * 1.0 + 1e-7)


def test_explicit_global_scale_and_preallocated_outputs(rng):
    w = _w(rng, 32, 64)
    q = np.zeros((32, 32), np.uint8)
    s = np.zeros((32, 4), np.uint8)
    rq, rs, g = nvfp4.nvfp4_quantize(w, 0.001, qdata=q, scale=s)
    assert rq is q and rs is s and g == pytest.approx(0.001)
    out = np.empty((32, 64), np.float32)
    r = nvfp4.nvfp4_dequantize(q, s, g, out=out)
    assert r is out
    assert np.array_equal(out, ref.nvfp4_dequantize(q, s, g, 32, 64))


def test_dequantize_shape_from_k_and_fp16(rng):
    w = _w(rng, 16, 64)
    q, s, g = nvfp4.nvfp4_quantize(w.astype(np.float16))
    flat = q.reshape(-1)
    d16 = nvfp4.nvfp4_dequantize(flat, s, g, k=64, dtype="float16")
    assert d16.shape == (16, 64) and d16.dtype == np.float16
    assert np.array_equal(d16, ref.nvfp4_dequantize(q, s, g, 16, 64).astype(np.float16))


def test_bfloat16_numpy_views(rng):
    w = _w(rng, 16, 64)
    q, s, g = nvfp4.nvfp4_quantize(w)
    bf = nvfp4.nvfp4_dequantize(q, s, g, dtype="bfloat16")
    assert bf.dtype == np.uint16
    expect = ref.nvfp4_dequantize(q, s, g, 16, 64)
    assert np.array_equal(nvfp4.from_bfloat16(bf), nvfp4.from_bfloat16(nvfp4.to_bfloat16(expect)))
    # bf16 input marked explicitly
    q2, s2, g2 = nvfp4.nvfp4_quantize(nvfp4.bfloat16(nvfp4.to_bfloat16(w)))
    assert q2.shape == q.shape and g2 > 0
    x = nvfp4.to_bfloat16(rng.standard_normal((2, 64)).astype(np.float32))
    y = nvfp4.nvfp4_linear(nvfp4.bfloat16(x), q, s, g)
    yref = nvfp4.from_bfloat16(x).astype(np.float64) @ expect.T.astype(np.float64)
    assert np.allclose(y, yref, rtol=1e-4, atol=1e-4)


def test_linear_matches_reference(rng):
    w = _w(rng, 40, 96)
    x = rng.standard_normal((2, 3, 96)).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)
    q, s, g = nvfp4.nvfp4_quantize(w)
    wd = ref.nvfp4_dequantize(q, s, g, 40, 96).astype(np.float64)
    y = nvfp4.nvfp4_linear(x, q, s, g, bias)
    expect = x.astype(np.float64) @ wd.T + bias
    bound = (96 + 16) * 2.0 ** -24 * (np.abs(x.astype(np.float64)) @ np.abs(wd).T) + 1e-6
    assert y.shape == (2, 3, 40)
    assert np.all(np.abs(y - expect) <= bound)
    y16 = nvfp4.nvfp4_linear(x, q, s, g, bias, dtype="float16", options=nvfp4.options(num_threads=1))
    assert y16.dtype == np.float16 and np.allclose(y16, expect, rtol=2e-3, atol=2e-3)


def test_swizzle_roundtrip_and_swizzled_layout(rng):
    w = _w(rng, 130, 64)
    q, s, g = nvfp4.nvfp4_quantize(w)
    size = nvfp4.swizzled_scale_size(130, 64)
    assert size == 256 * 4
    sw = nvfp4.swizzle_scales(s)
    assert sw.shape == (256, 4) and sw.size == size
    back = nvfp4.unswizzle_scales(sw, shape=s.shape)
    assert np.array_equal(back, s)
    q2, sw2, g2 = nvfp4.nvfp4_quantize(w, layout="swizzled")
    assert np.array_equal(q2, q) and np.array_equal(sw2, sw) and g2 == g
    d1 = nvfp4.nvfp4_dequantize(q, s, g)
    d2 = nvfp4.nvfp4_dequantize(q2, sw2, g2, layout=nvfp4.SCALE_SWIZZLED)
    assert np.array_equal(d1, d2)


def test_scaled_mm(rng):
    a = _w(rng, 8, 64, 1.0)
    b = _w(rng, 24, 64, 1.0)
    qa, sa, ga = nvfp4.nvfp4_quantize(a)
    qb, sb, gb = nvfp4.nvfp4_quantize(b)
    bias = np.ones(24, np.float32)
    out = nvfp4.nvfp4_scaled_mm(qa, sa, qb, sb, ga * gb, bias)
    da = ref.nvfp4_dequantize(qa, sa, 1.0, 8, 64).astype(np.float64)
    db = ref.nvfp4_dequantize(qb, sb, 1.0, 24, 64).astype(np.float64)
    expect = (ga * gb) * (da @ db.T) + 1
    assert out.shape == (8, 24)
    assert np.allclose(out, expect, rtol=1e-5, atol=1e-5)


def test_fake_quantize_and_backward(rng):
    w = _w(rng, 16, 64)
    fq, g = nvfp4.fake_quantize(w)
    q, s, g2 = nvfp4.nvfp4_quantize(w)
    assert g == g2 and np.array_equal(fq, ref.nvfp4_dequantize(q, s, g, 16, 64))
    x = rng.standard_normal((5, 64)).astype(np.float32)
    gy = rng.standard_normal((5, 16)).astype(np.float32)
    gx, gw = nvfp4.linear_backward(gy, x, q, s, g)
    wd = ref.nvfp4_dequantize(q, s, g, 16, 64).astype(np.float64)
    assert np.allclose(gx, gy.astype(np.float64) @ wd, rtol=1e-5, atol=1e-5)
    assert np.allclose(gw, gy.T.astype(np.float64) @ x, rtol=1e-5, atol=1e-5)
    gx_only, none = nvfp4.linear_backward(gy, None, q, s, g, grad_w=False)
    assert none is None and np.allclose(gx_only, gx)


def test_nf4_round_trip(rng):
    x = rng.standard_normal((32, 64)).astype(np.float32)
    q, st = nvfp4.nf4_quantize(x, 64)
    assert q.shape == (1024,) and st.absmax.shape == (32,)
    assert np.allclose(st.absmax, np.abs(x).max(axis=1))
    d = nvfp4.nf4_dequantize(q, st, x.shape)
    assert d.shape == x.shape
    assert np.array_equal(d.reshape(-1), ref.nf4_dequantize(q, st.absmax, x.size, 64))
    gap = np.max(np.diff(ref.NF4_CODEBOOK)) / 2
    assert np.all(np.abs(d - x) <= np.abs(x).max(axis=1, keepdims=True) * gap + 1e-6)
    # requantizing the decoded values reproduces the codes
    q2, _ = nvfp4.nf4_quantize(d, 64)
    assert np.array_equal(q2, q)


def test_nf4_double_quantization_and_scaled_mm(rng):
    w = rng.standard_normal((16, 128)).astype(np.float32)
    q, st = nvfp4.nf4_quantize(w, 64)
    qabs, nested, qmap, offset = nvfp4.nf4_double_quantize(st.absmax)
    assert qabs.dtype == np.uint8 and nested.shape == (1,) and qmap.shape == (256,)
    assert offset == pytest.approx(float(st.absmax.mean()), rel=1e-5)
    st2 = nvfp4.nf4_double_quantized_state(st)
    d1 = nvfp4.nf4_dequantize(q, st, w.shape)
    d2 = nvfp4.nf4_dequantize(q, st2, w.shape)
    assert np.allclose(d1, d2, rtol=0.05, atol=0.05)
    x = rng.standard_normal((3, 128)).astype(np.float32)
    y = nvfp4.nf4_scaled_mm(x, q, st, np.zeros(16, np.float32))
    assert y.shape == (3, 16)
    assert np.allclose(y, x.astype(np.float64) @ d1.T.astype(np.float64), rtol=1e-4, atol=1e-4)


def _mxfp4_decode(q, s, n, k):
    """MXFP4 dequantization in NumPy from the format rules (docs/formats.md)."""
    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float64)
    q = np.asarray(q, np.uint8).reshape(n, k // 2)
    codes = np.empty((n, k), np.uint8)
    codes[:, 0::2] = q & 0xF
    codes[:, 1::2] = q >> 4
    scale = np.ldexp(1.0, np.asarray(s, np.int32).reshape(n, k // 32) - 127)
    return (e2m1[codes] * np.repeat(scale, 32, axis=1)).astype(np.float32)


def test_mxfp4_quantize_dequantize_linear_scaled_mm(rng):
    w = _w(rng, 16, 64)
    q, s = nvfp4.mxfp4_quantize(w)
    assert q.shape == (16, 32) and s.shape == (16, 2) and s.dtype == np.uint8
    # the OCP scale rule: floor(log2(block amax)) - 2, biased by 127
    amax = np.abs(w).reshape(16, 2, 32).max(axis=2)
    assert np.array_equal(s.astype(np.int32), np.floor(np.log2(amax)).astype(np.int32) - 2 + 127)
    wd = _mxfp4_decode(q, s, 16, 64)
    assert np.array_equal(nvfp4.mxfp4_dequantize(q, s), wd)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    y = nvfp4.mxfp4_linear(x, q, s)
    assert np.allclose(y, x.astype(np.float64) @ wd.T.astype(np.float64), rtol=1e-5, atol=1e-5)
    aq, as_ = nvfp4.mxfp4_quantize(x)
    z = nvfp4.mxfp4_scaled_mm(aq, as_, q, s, alpha=2.0)
    ad = _mxfp4_decode(aq, as_, 3, 64)
    assert np.allclose(z, 2.0 * (ad.astype(np.float64) @ wd.T.astype(np.float64)), rtol=1e-5, atol=1e-5)
    with pytest.raises(nvfp4.Error):
        nvfp4.mxfp4_quantize(np.zeros((2, 48), np.float32))  # K not a multiple of 32


def test_mxfp4_linear_experts_matches_per_expert_linear(rng):
    E, N, K = 4, 16, 64
    w = rng.standard_normal((E * N, K)).astype(np.float32)
    q, s = nvfp4.mxfp4_quantize(w)
    blocks = q.reshape(E, N, K // 32, 16)  # the gpt-oss layout, as stored
    scales = s.reshape(E, N, K // 32)
    bias = rng.standard_normal((E, N)).astype(np.float32)
    experts, rows = [2, 0, 2, 3], [3, 1, 0, 2]
    x = rng.standard_normal((6, K)).astype(np.float32)
    y = nvfp4.mxfp4_linear_experts(x, blocks, scales, experts, rows, bias)
    assert y.shape == (6, N)
    r0 = 0
    for e, r in zip(experts, rows):
        ref = nvfp4.mxfp4_linear(x[r0:r0 + r], q[e * N:(e + 1) * N], s[e * N:(e + 1) * N], bias[e])
        assert np.array_equal(y[r0:r0 + r], ref)
        r0 += r
    with pytest.raises(nvfp4.Error, match=r"expert_of_group\[0\]"):
        nvfp4.mxfp4_linear_experts(x, blocks, scales, [4], [6])
    with pytest.raises(nvfp4.Error, match="group_rows"):
        nvfp4.mxfp4_linear_experts(x, blocks, scales, [0, 1], [2, 2])


def test_mxfp4_linear_in_a_session(rng):
    w = _w(rng, 16, 64)
    q, s = nvfp4.mxfp4_quantize(w)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    with nvfp4.Session() as ses:
        lin = ses.linear_mxfp4(q, s)
        assert np.array_equal(lin(x), nvfp4.mxfp4_linear(x, q, s))
        assert lin.info().format == "mxfp4"
        lin.close()


def test_numpy_arrays_are_described_exactly():
    """The DLTensor a NumPy array becomes: its data address (read from the
    array object where that was checked at import, else arr.ctypes.data),
    shape, strides in elements, dtype, read-only flag, for views, offsets,
    transposes, empty, 0-d, read-only and subclassed arrays."""
    import ctypes

    from nvfp4 import _capi, _dlpack

    if not hasattr(__import__("sys"), "pypy_version_info"):
        assert _dlpack._DATA_OFFSET is not None  # CPython: the fast address path is the one tested
    base = np.arange(120, dtype=np.float32).reshape(10, 12)
    ro = np.frombuffer(bytes(64), np.uint8)[3:]

    class Sub(np.ndarray):
        pass

    arrays = [base, base[2:, 3:], base[::2], base.T, base[4], np.zeros((0, 5), np.float16),
              np.array(3.0, np.float64), ro, base.view(Sub), np.asfortranarray(base)[1:],
              np.zeros((2, 3, 4), np.int8)[:, 1, :]]
    for a in arrays:
        b = _dlpack._from_numpy(a)
        t = b.tensor
        assert (t.data or 0) == (a.ctypes.data if a.size else (a.ctypes.data or 0))
        assert b.shape == a.shape == tuple(t.shape[i] for i in range(t.ndim))
        assert (t.device.device_type, t.device.device_id, t.byte_offset) == (_capi.kDLCPU, 0, 0)
        assert (t.dtype.code, t.dtype.bits, t.dtype.lanes) == _dlpack._NP_TO_DL[a.dtype] + (1,)
        if a.flags["C_CONTIGUOUS"]:
            assert not t.strides
        else:
            assert tuple(t.strides[i] for i in range(t.ndim)) == tuple(s // a.itemsize for s in a.strides)
        assert b.read_only == (not a.flags["WRITEABLE"])
        assert isinstance(b.pointer, ctypes._Pointer) and b.pointer.contents.data == t.data
    # The structs are copies: one array's description does not change another's.
    b1, b2 = _dlpack._from_numpy(base), _dlpack._from_numpy(ro)
    b1.tensor.dtype.bits = 7
    assert b2.tensor.dtype.bits == 8 and _dlpack._from_numpy(base).tensor.dtype.bits == 32
