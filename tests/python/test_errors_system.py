"""Error classes per status, version/capabilities/ISA/logging/tuner."""
import ctypes
import threading

import numpy as np
import pytest

import nvfp4
from nvfp4 import _capi, errors


def test_one_class_per_status_code():
    header = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 99}
    assert set(nvfp4.ERRORS) == header
    for status, cls in nvfp4.ERRORS.items():
        assert issubclass(cls, nvfp4.Error) and cls.status == status
        with pytest.raises(cls) as e:
            errors.raise_for(status)
        assert e.value.status == status
        assert e.value.status_string == nvfp4.status_string(status) != "unknown status"
    assert nvfp4.status_string(12345) == "unknown status"


def test_real_failures_map_to_their_classes():
    x = np.ones((4, 32), np.float32)
    with pytest.raises(nvfp4.DtypeError):
        nvfp4.nvfp4_quantize(x.astype(np.float64))
    with pytest.raises(nvfp4.StridesError):
        nvfp4.nvfp4_quantize(np.ones((32, 4), np.float32).T)
    with pytest.raises(nvfp4.AliasingError):
        nvfp4.fake_quantize(x, out=x)
    with pytest.raises(nvfp4.InvalidArgumentError):
        q, s, _ = nvfp4.nvfp4_quantize(x)
        nvfp4.nvfp4_dequantize(q, s, -1.0)
    with pytest.raises(nvfp4.UnsupportedError):
        nvfp4.set_max_isa("neon" if nvfp4.capabilities().cpu_vendor != "arm" else "avx2")
    # a NULL required pointer, straight through the ctypes layer
    lib = _capi.get()
    status = lib.NVFP4_quantize(None, None, None, 0, 0.0, None, None)
    with pytest.raises(nvfp4.NullPointerError) as e:
        errors.raise_for(status, lib, "NVFP4_quantize")
    assert e.value.message == nvfp4.last_error() and "NVFP4_quantize" in e.value.message
    # the size-query protocol
    needed = ctypes.c_size_t()
    with nvfp4.Session() as s:
        assert lib.Q4_session_diagnostics(s.handle, None, 0, ctypes.byref(needed)) == 13
        assert needed.value > 2
    nvfp4.clear_error()
    assert nvfp4.last_error() == ""


def test_errors_are_thread_local():
    nvfp4.clear_error()
    seen = {}

    def fail():
        try:
            nvfp4.nvfp4_quantize(np.zeros((1, 24), np.float32))
        except nvfp4.ShapeError as e:
            seen["message"] = e.message
        seen["thread_last"] = nvfp4.last_error()

    t = threading.Thread(target=fail)
    t.start()
    t.join()
    assert "multiple of 16" in seen["message"] and seen["thread_last"] == seen["message"]
    assert nvfp4.last_error() == ""


def test_version_capabilities_isa():
    assert nvfp4.abi_version() == nvfp4.ABI_VERSION == 1
    assert nvfp4.version() == 100 and nvfp4.version_string() == "0.1.0"
    assert "libNVFP4" in nvfp4.library_path()
    caps = nvfp4.capabilities()
    assert caps.abi_version == 1 and caps.num_cpus >= 1 and caps.native_load_state
    assert caps.isa_active in ("scalar", "avx2", "avx512", "avx512_vnni", "neon", "neon_dotprod")
    assert nvfp4.isa_name(0) == "scalar"
    try:
        nvfp4.set_max_isa("scalar")
        nvfp4.nvfp4_quantize(np.ones((1, 16), np.float32))
        assert nvfp4.last_isa_used() == "scalar"
        assert nvfp4.capabilities().isa_active == "scalar"
    finally:
        nvfp4.set_max_isa("best")
    nvfp4.nvfp4_quantize(np.ones((1, 16), np.float32))
    assert nvfp4.last_isa_used() == caps.isa_best


def test_log_callback_receives_messages():
    got = []
    old = nvfp4.get_log_level()
    nvfp4.set_log_callback(lambda level, msg: got.append((level, msg)))
    try:
        nvfp4.set_log_level("debug")
        assert nvfp4.get_log_level() == nvfp4.LOG_DEBUG
        with pytest.raises(nvfp4.ShapeError):
            nvfp4.nvfp4_quantize(np.zeros((1, 24), np.float32))
    finally:
        nvfp4.set_log_callback(None)
        nvfp4.set_log_level(old)
    assert any(level == nvfp4.LOG_DEBUG and "multiple of 16" in msg for level, msg in got), got


def test_tune_matmul_small():
    r = nvfp4.tune_matmul(dim=64, runs=1, persist=False)
    assert r.dim == 64 and r.candidates >= 1 and not r.persisted and r.best_ms > 0


def test_options_and_library_errors(monkeypatch, tmp_path):
    o = nvfp4.options(compute_path="kernel_only", backend="nvfp4_kernel", target="cpu", math_mode="fast",
                      num_threads=1)
    assert (o.compute_path, o.backend, o.target, o.math_mode, o.num_threads) == (1, 1, 1, 1, 1)
    x = np.ones((2, 32), np.float32)
    q, s, g = nvfp4.nvfp4_quantize(x)
    y = nvfp4.nvfp4_linear(x, q, s, g, options={"math_mode": "fast"})
    assert np.allclose(y, 32.0, rtol=0.02)
    with pytest.raises(nvfp4.LibraryError):
        nvfp4._capi.load(str(tmp_path / "libNVFP4.so.missing"))
    monkeypatch.setenv("NVFP4_LIBRARY", "/x/libNVFP4.so")
    assert nvfp4._capi.candidate_paths() == ["/x/libNVFP4.so"]
    monkeypatch.delenv("NVFP4_LIBRARY")
    assert nvfp4._capi.candidate_paths()[-1] == "libNVFP4.so.1"


def test_installed_package_finds_the_prefix_library(tmp_path, monkeypatch):
    # cmake --install layout: <prefix>/lib/python3/dist-packages/nvfp4 and <prefix>/lib/libNVFP4.so.1
    pkg = tmp_path / "prefix" / "lib" / "python3" / "dist-packages" / "nvfp4"
    pkg.mkdir(parents=True)
    (pkg / "_capi.py").write_text("")
    lib = tmp_path / "prefix" / "lib" / "libNVFP4.so.1"
    assert nvfp4._capi.installed_prefix_paths(str(pkg)) == []  # only existing files
    lib.write_bytes(b"")
    assert nvfp4._capi.installed_prefix_paths(str(pkg)) == [str(lib)]
    # not under a site directory: nothing relative to the package is guessed
    assert nvfp4._capi.installed_prefix_paths(str(tmp_path / "prefix" / "lib")) == []
    # order: NVFP4_LIBRARY unset -> next to the package, the prefix, then the system loader
    monkeypatch.delenv("NVFP4_LIBRARY", raising=False)
    (pkg / "libNVFP4.so").write_bytes(b"")
    monkeypatch.setattr(nvfp4._capi, "__file__", str(pkg / "_capi.py"))
    paths = nvfp4._capi.candidate_paths()
    assert paths[:2] == [str(pkg / "libNVFP4.so"), str(lib)] and paths[-1] == "libNVFP4.so.1"


def test_abi_mismatch_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(nvfp4._capi, "ABI_VERSION", 2)
    with pytest.raises(nvfp4.LibraryError, match="ABI version 1.*written for ABI version 2"):
        nvfp4._capi.load(nvfp4.library_path())


def test_library_next_to_the_package_is_found(tmp_path):
    import os
    import shutil
    import subprocess
    import sys
    pkg = os.path.dirname(nvfp4.__file__)
    dst = tmp_path / "nvfp4"
    shutil.copytree(pkg, dst, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(os.path.realpath(nvfp4.library_path()), dst / "libNVFP4.so.1")
    env = {k: v for k, v in os.environ.items() if k not in ("NVFP4_LIBRARY", "PYTHONPATH")}
    out = subprocess.run([sys.executable, "-c", "import nvfp4; print(nvfp4.library_path())"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(dst / "libNVFP4.so.1")


_FORK_CASE = None


def _linear_in_forked_child(_):
    x, q, s, g = _FORK_CASE
    return nvfp4.nvfp4_linear(x, q, s, g).tobytes()


def test_forked_workers_get_the_same_bits_while_a_parent_thread_is_in_the_library():
    # multiprocessing with the "fork" start method (Linux's default before
    # Python 3.14; data loaders): the children inherit the library with a
    # parent thread inside a product (ctypes drops the GIL), and must
    # neither hang nor compute other bits.
    import multiprocessing
    global _FORK_CASE
    rng = np.random.default_rng(5)
    w = rng.standard_normal((512, 1024), dtype=np.float32)
    x = rng.standard_normal((8, 1024), dtype=np.float32)
    q, s, g = nvfp4.nvfp4_quantize(w)
    _FORK_CASE = (x, q, s, g)
    expected = nvfp4.nvfp4_linear(x, q, s, g).tobytes()
    stop = threading.Event()

    def busy():
        while not stop.is_set():
            nvfp4.nvfp4_quantize(w)
            nvfp4.nvfp4_linear(x, q, s, g)

    threads = [threading.Thread(target=busy) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        ctx = multiprocessing.get_context("fork")
        for _ in range(10):
            with ctx.Pool(4) as pool:
                got = pool.map_async(_linear_in_forked_child, range(8)).get(timeout=120)
            assert got == [expected] * 8
    finally:
        stop.set()
        for thread in threads:
            thread.join()
