"""Version, errors, capabilities, ISA control, tuner, logging, managed memory."""
import ctypes
import threading
from dataclasses import dataclass

from . import _capi
from ._dlpack import Args, Tensor, _permanent
from .errors import check


def _s(b):
    return (b or b"").decode("utf-8", "replace")


def version():
    """Runtime version number (MAJOR*10000 + MINOR*100 + PATCH)."""
    return _capi.get().Q4_version()


def version_string():
    return _s(_capi.get().Q4_version_string())


def abi_version():
    return _capi.get().Q4_abi_version()


def library_path():
    """The path the binding loaded libNVFP4 from."""
    return _capi.get()._nvfp4_path


def status_string(status):
    return _s(_capi.get().Q4_status_string(int(status)))


def last_error():
    """This thread's message for its last failed library call ("" if none)."""
    return _s(_capi.get().Q4_last_error())


def clear_error():
    _capi.get().Q4_clear_error()


# ------------------------------------------------------------------ capabilities
@dataclass
class Capabilities:
    abi_version: int
    cpu_features: int
    cpu_feature_names: tuple
    isa_best: str
    isa_active: str
    num_cpus: int
    cuda_state: int
    cuda_runtime_version: int
    cuda_driver_version: int
    cuda_device_count: int
    managed_memory: bool
    fp4_tensor_cores: bool
    cpu_vendor: str
    cpu_brand: str
    cuda_archs: str
    native_load_state: str


def capabilities():
    c = _capi.Q4_capabilities()
    c.struct_size = ctypes.sizeof(c)
    check(_capi.get().Q4_get_capabilities(ctypes.byref(c)), "Q4_get_capabilities")
    names = tuple(n for n, bit in _capi.CPU_FEATURES.items() if c.cpu_features >> bit & 1)
    return Capabilities(c.abi_version, c.cpu_features, names, isa_name(c.isa_best), isa_name(c.isa_active),
                        c.num_cpus, c.cuda_state, c.cuda_runtime_version, c.cuda_driver_version,
                        c.cuda_device_count, bool(c.managed_memory), bool(c.fp4_tensor_cores), _s(c.cpu_vendor),
                        _s(c.cpu_brand), _s(c.cuda_archs), _s(c.native_load_state))


_ISAS = {"scalar": 0, "avx2": 1, "avx_vnni": 4, "avx512": 2, "avx512_vnni": 3, "neon": 16, "neon_dotprod": 17,
         "neon_i8mm": 18, "best": 255}


def isa_name(isa):
    return _s(_capi.get().Q4_isa_name(int(isa)))


def set_max_isa(isa):
    """Caps the CPU kernels' ISA: a Q4_ISA_* value or 'scalar' | 'avx2' |
    'avx_vnni' | 'avx512' | 'avx512_vnni' | 'neon' | 'neon_dotprod' | 'neon_i8mm' | 'best'."""
    if isinstance(isa, str):
        isa = _ISAS[isa.lower()]
    check(_capi.get().Q4_set_max_isa(int(isa)), "Q4_set_max_isa")


def last_isa_used():
    """Name of the ISA this thread's last operation used (None before the first)."""
    v = _capi.get().Q4_last_isa_used()
    return None if v < 0 else isa_name(v)


@dataclass
class TuneResult:
    dim: int
    runs: int
    candidates: int
    kc_default: int
    mc_default: int
    kc_best: int
    mc_best: int
    default_ms: float
    best_ms: float
    adopted: bool
    persisted: bool
    cache_path: str
    cpu_signature: str


def tune_matmul(dim=256, runs=3, persist=False):
    """Times GEMM blockings (Q4_tune_matmul); persist=True stores the winner."""
    r = _capi.Q4_tune_result()
    r.struct_size = ctypes.sizeof(r)
    check(_capi.get().Q4_tune_matmul(int(dim), int(runs), int(bool(persist)), ctypes.byref(r)), "Q4_tune_matmul")
    return TuneResult(r.dim, r.runs, r.candidates, r.kc_default, r.mc_default, r.kc_best, r.mc_best,
                      r.default_ms, r.best_ms, bool(r.adopted), bool(r.persisted), _s(r.cache_path),
                      _s(r.cpu_signature))


# ------------------------------------------------------------------ logging
_LEVELS = {"off": 0, "error": 1, "warn": 2, "info": 3, "debug": 4}
_log_lock = threading.Lock()
_log_state = {"fn": None}


@_capi.Q4_log_callback
def _log_trampoline(level, message, user):
    fn = _log_state.get("fn")
    if fn is not None:
        try:
            fn(int(level), _s(message))
        except Exception:  # never propagate into C
            pass


_permanent(_log_trampoline)


def set_log_callback(fn):
    """Installs fn(level: int, message: str) as the process-wide log sink (None
    removes it). It may be called from any thread; exceptions are ignored."""
    with _log_lock:
        _log_state["fn"] = fn
        cb = _log_trampoline if fn is not None else _capi.Q4_log_callback()
        check(_capi.get().Q4_set_log_callback(cb, None), "Q4_set_log_callback")


def set_log_level(level):
    if isinstance(level, str):
        level = _LEVELS[level.lower()]
    check(_capi.get().Q4_set_log_level(int(level)), "Q4_set_log_level")


def get_log_level():
    return _capi.get().Q4_get_log_level()


# ------------------------------------------------------------------ CUDA / managed memory
def can_use_managed(device=0):
    v = ctypes.c_int32()
    check(_capi.get().NVFP4_can_use_managed(int(device), ctypes.byref(v)), "NVFP4_can_use_managed")
    return bool(v.value)


def is_managed_tensor(t):
    v = ctypes.c_int32()
    with Args() as a:
        b = a.add(t, "t")
        check(_capi.get().NVFP4_is_managed_tensor(b.ptr, ctypes.byref(v)), "NVFP4_is_managed_tensor")
    return bool(v.value)


def to_managed(src, device=0, flags=0):
    """Copies src into CUDA managed memory -> nvfp4.Tensor (export with
    torch.from_dlpack). flags: MANAGED_READ_MOSTLY | MANAGED_PREFETCH |
    MANAGED_REPORT_MANAGED. NotAvailableError without CUDA."""
    out = ctypes.POINTER(_capi.DLManagedTensorVersioned)()
    with Args() as a:
        b = a.add(src, "src")
        check(_capi.get().NVFP4_to_managed(b.ptr, int(device), int(flags), ctypes.byref(out)), "NVFP4_to_managed")
    return Tensor(out)


def managed_prefetch(t, device=-1, stream=None):
    """Prefetches a managed tensor to `device` (-1: the CPU)."""
    with Args() as a:
        b = a.add(t, "t")
        check(_capi.get().NVFP4_managed_prefetch(b.ptr, int(device), stream), "NVFP4_managed_prefetch")


def memory_info(device=0):
    """(free_bytes, total_bytes) of a CUDA device."""
    free, total = ctypes.c_uint64(), ctypes.c_uint64()
    check(_capi.get().NVFP4_memory_info(int(device), ctypes.byref(free), ctypes.byref(total)), "NVFP4_memory_info")
    return free.value, total.value


def empty_cache():
    """Releases the CUDA backend's cached workspaces and cuBLASLt heuristic
    results (all devices); does nothing without CUDA."""
    check(_capi.get().NVFP4_empty_cache(), "NVFP4_empty_cache")


def cuda_synchronize(device=0, stream=None):
    check(_capi.get().Q4_cuda_synchronize(int(device), stream), "Q4_cuda_synchronize")
