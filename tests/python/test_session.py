"""Sessions, linears, mutable tensors and snapshots exported through DLPack."""
import ctypes
import gc

import numpy as np
import pytest

import nvfp4
import nvfp4_reference as ref
from nvfp4 import _dlpack


def test_linear_lifecycle(rng, session):
    w = (0.05 * rng.standard_normal((24, 64))).astype(np.float32)
    q, s, g = nvfp4.nvfp4_quantize(w)
    bias = rng.standard_normal(24).astype(np.float32)
    lin = session.linear_nvfp4(q, s, g, bias=bias)
    info = lin.info()
    assert (info.format, info.out_features, info.in_features, info.weight_version) == ("nvfp4", 24, 64, 1)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    expect = x.astype(np.float64) @ ref.nvfp4_dequantize(q, s, g, 24, 64).T.astype(np.float64) + bias
    assert np.allclose(lin(x), expect, rtol=1e-5, atol=1e-5)
    out = np.empty((2, 24), np.float16)
    assert lin.forward(x, out=out) is out and np.allclose(out, expect, rtol=2e-3, atol=2e-3)
    # update with a new weight (same shape), version bumps
    w2 = -w
    lin.update_weight(nvfp4.WeightBundle.from_float(w2, bias=bias))
    assert lin.info().weight_version == 2
    fq, _ = nvfp4.fake_quantize(w2)
    assert np.allclose(lin(x), x.astype(np.float64) @ fq.T.astype(np.float64) + bias, rtol=1e-5, atol=1e-5)
    diag = lin.diagnostics()
    assert diag["format"].lower() == "nvfp4" and "backend" in diag
    st = session.stats()
    assert st.live_linears == 1 and st.forwards >= 3
    assert "stats" in session.diagnostics()
    with pytest.raises(nvfp4.StateError):
        session.close()  # a linear is alive
    lin.close()


def test_nf4_linears(rng, session):
    w = rng.standard_normal((16, 128)).astype(np.float32)
    q, st = nvfp4.nf4_quantize(w, 64)
    lin = session.linear_nf4(q, st, 16, 128)
    x = rng.standard_normal((3, 128)).astype(np.float32)
    d = nvfp4.nf4_dequantize(q, st, w.shape)
    assert np.allclose(lin(x), x.astype(np.float64) @ d.T.astype(np.float64), rtol=1e-4, atol=1e-4)
    assert lin.info().format == "nf4"
    lin2 = session.linear_from_float(w, "nf4", blocksize=64)
    assert np.allclose(lin2(x), lin(x), rtol=1e-5, atol=1e-5)
    lin.close()
    lin2.close()


def test_session_options_and_errors():
    with nvfp4.Session(compute_path="dequant_matmul_only", num_threads=1, diagnostics=True, math_mode="exact") as s:
        assert s.stats().live_linears == 0
    with pytest.raises(nvfp4.NotAvailableError):
        nvfp4.Session(target="cuda")
    with pytest.raises(ValueError):
        nvfp4.Session(target="tpu")


def test_mutable_write_commit_abort_busy(session):
    m = session.mutable((3, 4), "float32")
    assert m.version == 0
    buf = m.begin_write("discard")
    buf[:] = 7
    with pytest.raises(nvfp4.BusyError):
        m.begin_write()
    assert m.commit() == 1 and m.version == 1
    assert not buf.flags.writeable  # the view is closed after commit
    buf = m.begin_write()  # keep: starts as a copy
    assert np.all(buf == 7)
    buf[:] = 9
    m.abort()
    assert m.version == 1
    with m.acquire() as snap:
        assert np.all(snap.numpy() == 7)
    with pytest.raises(RuntimeError):
        with m.write() as buf:
            buf[:] = 1
            raise RuntimeError("aborted")
    assert m.version == 1
    m.close()


def test_snapshots_through_numpy_and_torch(session):
    torch = pytest.importorskip("torch")
    m = session.mutable((4, 8), np.float32)
    with m.write() as buf:
        buf[:] = np.arange(32, dtype=np.float32).reshape(4, 8)
    snap = m.acquire()
    assert snap.version == 1 and snap.read_only and snap.shape == (4, 8)
    assert snap.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(snap)
    t = torch.from_dlpack(snap)
    v = snap.numpy()
    assert not v.flags.writeable
    ptr = snap.data_ptr
    assert a.ctypes.data == ptr and t.data_ptr() == ptr and v.ctypes.data == ptr  # zero-copy
    assert np.array_equal(a, np.arange(32).reshape(4, 8)) and torch.equal(t, torch.arange(32.0).reshape(4, 8))
    # later commits do not change the snapshot
    with m.write("discard") as buf:
        buf[:] = -1
    assert np.array_equal(a, np.arange(32).reshape(4, 8)) and float(t.sum()) == 496.0
    assert session.stats().live_snapshots == 1
    snap.release()  # the exports keep the memory alive
    assert session.stats().live_snapshots == 1
    assert np.array_equal(v, np.arange(32).reshape(4, 8))
    del a, t, v
    gc.collect()
    assert session.stats().live_snapshots == 0
    # bf16 mutable tensor: torch sees bf16, NumPy gets uint16 bits
    mb = session.mutable((2, 2), "bfloat16")
    with mb.write() as buf:
        buf[:] = nvfp4.to_bfloat16(np.array([[1, 2], [3, 4]], np.float32))
    tb = torch.from_dlpack(mb.acquire())
    assert tb.dtype == torch.bfloat16 and tb.tolist() == [[1, 2], [3, 4]]
    del tb
    gc.collect()
    m.close()
    mb.close()


def _capsule_name(capsule):
    return _dlpack._api.PyCapsule_GetName(id(capsule))


class _Producer:
    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule


def test_versioned_and_legacy_capsules(session):
    m = session.mutable((16,), "float32")
    with m.write() as buf:
        buf[:] = np.linspace(-1, 1, 16)
    snap = m.acquire()
    cap_v = snap.__dlpack__(max_version=(1, 1))
    assert _capsule_name(cap_v) == b"dltensor_versioned"
    cap_l = snap.__dlpack__()
    assert _capsule_name(cap_l) == b"dltensor"
    # consuming the versioned capsule keeps READ_ONLY: refused as an output
    with pytest.raises(ValueError, match="read-only"):
        nvfp4.fake_quantize(np.zeros(16, np.float32), out=_Producer(cap_v))
    assert _capsule_name(cap_v) == b"used_dltensor_versioned"
    # a legacy capsule as an input: renamed, consumed, released after the call
    q, s, g = nvfp4.nvfp4_quantize(_Producer(cap_l))
    assert _capsule_name(cap_l) == b"used_dltensor"
    assert np.array_equal(q, nvfp4.nvfp4_quantize(np.linspace(-1, 1, 16).astype(np.float32))[0])
    # an unconsumed capsule releases its export when it is destroyed
    cap = snap.__dlpack__(max_version=(1, 0))
    del cap, cap_v, cap_l
    snap.release()
    gc.collect()
    assert session.stats().live_snapshots == 0
    m.close()


def test_legacy_export_without_library_helper(session, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(_dlpack, "use_library_unversioned", False)
    m = session.mutable((2, 3), "float32")
    t = torch.from_dlpack(m.acquire())
    assert t.shape == (2, 3) and float(t.abs().sum()) == 0.0
    del t
    gc.collect()
    assert session.stats().live_snapshots == 0
    m.close()


def test_managed_memory_not_available_without_cuda():
    x = np.ones((4, 4), np.float32)
    assert nvfp4.can_use_managed(0) is False
    nvfp4.empty_cache()  # Q4_OK without CUDA: nothing cached
    assert nvfp4.is_managed_tensor(x) is False
    with pytest.raises(nvfp4.NotAvailableError):
        nvfp4.to_managed(x, 0, nvfp4.MANAGED_READ_MOSTLY)
    with pytest.raises(nvfp4.NotAvailableError):
        nvfp4.managed_prefetch(x, 0)
    with pytest.raises(nvfp4.NotAvailableError):
        nvfp4.memory_info(0)
    with pytest.raises(nvfp4.NotAvailableError):
        nvfp4.cuda_synchronize(0)
    assert ctypes.sizeof(nvfp4._capi.DLManagedTensorVersioned) == 8 + 8 + 8 + 8 + 48


def test_legacy_export_through_library_helper(session, monkeypatch):
    """Q4_dlpack_to_unversioned comes with a newer library; a ctypes stand-in
    with its contract checks the calling code (success and failure)."""
    torch = pytest.importorskip("torch")
    from nvfp4 import _capi
    lib = _capi.get()
    made = []

    @_capi.DLManagedTensorDeleter
    def legacy_deleter(p):
        inner = ctypes.cast(p.contents.manager_ctx, ctypes.POINTER(_capi.DLManagedTensorVersioned))
        inner.contents.deleter(inner)

    def impl(vptr, out_pp, fail=[False]):
        if fail[0]:
            return 18
        legacy = _capi.DLManagedTensor()
        legacy.dl_tensor = vptr.contents.dl_tensor
        legacy.manager_ctx = ctypes.cast(vptr, ctypes.c_void_p).value
        legacy.deleter = legacy_deleter
        made.append(legacy)
        out_pp[0] = ctypes.pointer(legacy)
        return 0

    proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(_capi.DLManagedTensorVersioned),
                             ctypes.POINTER(ctypes.POINTER(_capi.DLManagedTensor)))
    fake = proto(impl)
    monkeypatch.setattr(lib, "Q4_dlpack_to_unversioned", fake, raising=False)
    m = session.mutable((3,), "float32")
    with m.write() as buf:
        buf[:] = [1, 2, 3]
    snap = m.acquire()
    t = torch.from_dlpack(snap)
    assert len(made) == 1 and t.tolist() == [1.0, 2.0, 3.0]
    impl.__defaults__[0][0] = True
    with pytest.raises(nvfp4.NotAvailableError):
        snap.__dlpack__()
    snap.release()
    del t
    gc.collect()
    assert session.stats().live_snapshots == 0
    m.close()


def test_set_stream_on_a_cpu_session_is_refused():
    # Only CUDA sessions have a stream (Q4_session_set_stream).
    with nvfp4.Session(target="cpu") as s:
        with pytest.raises(nvfp4.UnsupportedError):
            s.set_stream(None)
