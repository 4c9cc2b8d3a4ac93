"""PyTorch tensors through DLPack: zero-copy, written in place."""
import numpy as np
import pytest

import nvfp4
import nvfp4_reference as ref

torch = pytest.importorskip("torch")


def test_quantize_writes_torch_outputs_in_place():
    torch.manual_seed(0)
    w = 0.05 * torch.randn(32, 128)
    q = torch.empty(32, 64, dtype=torch.uint8)
    s = torch.empty(32, 8, dtype=torch.uint8)
    pq, ps, pw = q.data_ptr(), s.data_ptr(), w.data_ptr()
    rq, rs, g = nvfp4.nvfp4_quantize(w, qdata=q, scale=s)
    assert rq is q and rs is s
    assert (q.data_ptr(), s.data_ptr(), w.data_ptr()) == (pq, ps, pw)
    expect = ref.nvfp4_dequantize(q.numpy(), s.numpy(), g, 32, 128)
    qn, sn, gn = nvfp4.nvfp4_quantize(w.numpy())
    assert np.array_equal(qn, q.numpy()) and np.array_equal(sn, s.numpy()) and gn == g
    out = torch.empty(32, 128)
    po = out.data_ptr()
    assert nvfp4.nvfp4_dequantize(q, s, g, out=out) is out and out.data_ptr() == po
    assert np.array_equal(out.numpy(), expect)


def test_linear_writes_torch_output_in_place():
    torch.manual_seed(1)
    w = 0.05 * torch.randn(24, 64)
    x = torch.randn(4, 64)
    bias = torch.randn(24)
    q, s, g = nvfp4.nvfp4_quantize(w)
    out = torch.full((4, 24), float("nan"))
    ptr = out.data_ptr()
    r = nvfp4.nvfp4_linear(x, torch.from_numpy(q), torch.from_numpy(s), g, bias, out=out)
    assert r is out and out.data_ptr() == ptr
    wd = ref.nvfp4_dequantize(q, s, g, 24, 64).astype(np.float64)
    expect = x.numpy().astype(np.float64) @ wd.T + bias.numpy()
    assert np.allclose(out.numpy(), expect, rtol=1e-5, atol=1e-5)


def test_bf16_and_fp16_torch_tensors():
    torch.manual_seed(2)
    w = 0.05 * torch.randn(16, 64)
    q, s, g = nvfp4.nvfp4_quantize(w.to(torch.bfloat16))
    wd = ref.nvfp4_dequantize(q, s, g, 16, 64)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    out = torch.empty(3, 16, dtype=torch.bfloat16)
    ptr = out.data_ptr()
    nvfp4.nvfp4_linear(x, q, s, g, out=out)
    assert out.data_ptr() == ptr
    expect = x.float().numpy().astype(np.float64) @ wd.T.astype(np.float64)
    assert np.allclose(out.float().numpy(), expect, rtol=1e-2, atol=1e-2)
    x16 = torch.randn(3, 64, dtype=torch.float16)
    y16 = nvfp4.nvfp4_linear(x16, q, s, g, dtype="float16")
    assert y16.dtype == np.float16
    d = torch.empty(16, 64, dtype=torch.bfloat16)
    nvfp4.nvfp4_dequantize(q, s, g, out=d)
    assert torch.equal(d, torch.from_numpy(wd).to(torch.bfloat16))


def test_non_contiguous_torch_input_is_refused_not_copied():
    x = torch.randn(64, 32).t()  # [32, 64] with transposed strides
    with pytest.raises(nvfp4.StridesError):
        nvfp4.nvfp4_quantize(x)


def test_linear_object_forward_with_torch():
    torch.manual_seed(3)
    w = 0.05 * torch.randn(8, 32)
    with nvfp4.Session() as sess:
        lin = sess.linear_from_float(w)
        x = torch.randn(2, 5, 32)
        out = torch.empty(2, 5, 8)
        ptr = out.data_ptr()
        assert lin(x, out=out) is out and out.data_ptr() == ptr
        fq, _ = nvfp4.fake_quantize(w.numpy())
        assert np.allclose(out.numpy(), x.numpy().astype(np.float64) @ fq.T.astype(np.float64), atol=1e-4)
        lin.close()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_inputs_reach_the_library_without_copies(dtype, passed_pointers):
    """The DLTensor.data the library receives is the caller's tensor memory
    (data_ptr()), for inputs as well as outputs: quantize, dequantize, linear."""
    tdt = getattr(torch, dtype)
    torch.manual_seed(4)
    w = (0.05 * torch.randn(24, 64)).to(tdt)
    q = torch.empty(24, 32, dtype=torch.uint8)
    s = torch.empty(24, 4, dtype=torch.uint8)
    _, _, g = nvfp4.nvfp4_quantize(w, qdata=q, scale=s)
    args = passed_pointers.of("NVFP4_quantize")
    assert args[:3] == [w.data_ptr(), q.data_ptr(), s.data_ptr()]

    d = torch.empty(24, 64, dtype=tdt)
    nvfp4.nvfp4_dequantize(q, s, g, out=d)
    args = passed_pointers.of("NVFP4_dequantize")
    assert (args[0], args[1], args[4]) == (q.data_ptr(), s.data_ptr(), d.data_ptr())

    # x is a row slice of a larger tensor: its memory starts inside the storage
    big = torch.randn(7, 64).to(tdt)
    x = big[2:6]
    assert x.is_contiguous() and x.data_ptr() != big.data_ptr()
    bias = torch.randn(24)
    out = torch.empty(4, 24, dtype=tdt)
    nvfp4.nvfp4_linear(x, q, s, g, bias, out=out)
    args = passed_pointers.of("NVFP4_linear")
    assert (args[0], args[1], args[2], args[5], args[6]) == (
        x.data_ptr(), q.data_ptr(), s.data_ptr(), bias.data_ptr(), out.data_ptr())
    wd = ref.nvfp4_dequantize(q.numpy(), s.numpy(), g, 24, 64).astype(np.float64)
    expect = x.float().numpy().astype(np.float64) @ wd.T + bias.numpy()
    tol = 1e-5 if dtype == "float32" else 3e-2
    assert np.allclose(out.float().numpy(), expect, rtol=tol, atol=tol)
    assert torch.equal(d.float(), torch.from_numpy(wd).to(tdt).float())


def test_outputs_follow_a_torch_cuda_input_allocation_path():
    """The allocation taken when an input is a PyTorch CUDA tensor (results made
    by torch on that device; tests/python/test_cuda_torch.py runs it on a GPU),
    exercised here with a CPU tensor whose DLPack device is relabelled."""
    from nvfp4 import _capi, _dlpack
    x = torch.zeros(3, 4)
    with _dlpack.Args() as a:
        b = a.add(x, "x")
        assert a._torch_cuda_device() is None  # a CPU tensor: NumPy results
        assert isinstance(a.out(None, "out", (3, 5), "float32").obj, np.ndarray)
        b.tensor.device = _capi.DLDevice(_capi.kDLCUDA, 0)  # as a CUDA tensor would describe itself
        assert a._torch_cuda_device() == x.device
        for dtype, expect in (("float32", torch.float32), ("float16", torch.float16),
                              ("bfloat16", torch.bfloat16), (np.dtype(np.uint8), torch.uint8)):
            o = a.out(None, "out", (3, 5), dtype).obj
            assert isinstance(o, torch.Tensor) and o.dtype == expect and tuple(o.shape) == (3, 5)
        b.tensor.device = _capi.DLDevice(_capi.kDLCPU, 0)  # back before the producer's deleter runs
