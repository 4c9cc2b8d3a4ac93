"""Zero-copy marshalling between Python objects and DLPack.

Inputs (borrow): NumPy arrays are described directly (pointer, shape,
strides); any other object with __dlpack__ (PyTorch tensors, ...) is
exported to a capsule, which is consumed as the DLPack Python specification
says: "dltensor_versioned" or legacy "dltensor" is renamed to
"used_dltensor_versioned" / "used_dltensor", the capsule is kept alive
while the library uses the tensor, and its deleter is called afterwards.

Outputs (export): library-owned DLManagedTensorVersioned tensors are wrapped
in Tensor, which implements __dlpack__ / __dlpack_device__ (versioned
capsule when the consumer asks with max_version >= (1, 0), else a legacy
"dltensor" one).
"""
import ctypes
import itertools
import threading

import numpy as np

from . import _capi
from ._capi import DLDataType, DLManagedTensor, DLManagedTensorVersioned, DLTensor

# ------------------------------------------------------------------ dtypes
_NP_TO_DL = {
    np.dtype(np.float32): (_capi.kDLFloat, 32),
    np.dtype(np.float16): (_capi.kDLFloat, 16),
    np.dtype(np.float64): (_capi.kDLFloat, 64),
    np.dtype(np.uint8): (_capi.kDLUInt, 8),
    np.dtype(np.uint16): (_capi.kDLUInt, 16),
    np.dtype(np.uint32): (_capi.kDLUInt, 32),
    np.dtype(np.uint64): (_capi.kDLUInt, 64),
    np.dtype(np.int8): (_capi.kDLInt, 8),
    np.dtype(np.int16): (_capi.kDLInt, 16),
    np.dtype(np.int32): (_capi.kDLInt, 32),
    np.dtype(np.int64): (_capi.kDLInt, 64),
    np.dtype(np.bool_): (_capi.kDLBool, 8),
}


def dl_to_numpy_dtype(code, bits, lanes=1):
    """The NumPy storage dtype of a DLPack dtype (bf16 -> uint16, fp8/fp4 -> uint8 bytes)."""
    if code == _capi.kDLBfloat and bits == 16:
        return np.dtype(np.uint16)
    if code in (_capi.kDLFloat8_e4m3fn, _capi.kDLFloat4_e2m1fn) or (code, bits) == (_capi.kDLBool, 8):
        return np.dtype(np.uint8) if code != _capi.kDLBool else np.dtype(np.bool_)
    for dt, (c, b) in _NP_TO_DL.items():
        if (c, b) == (code, bits) and lanes == 1:
            return dt
    raise TypeError(f"no NumPy dtype for DLPack dtype code={code} bits={bits} lanes={lanes}")


def output_dtype(dtype):
    """'float32' | 'float16' | 'bfloat16' (or NumPy float dtypes) -> (numpy storage dtype, is_bf16)."""
    if dtype is None:
        return np.dtype(np.float32), False
    if isinstance(dtype, str) and dtype.lower() in ("bfloat16", "bf16"):
        return np.dtype(np.uint16), True
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float16)):
        raise TypeError(f"output dtype must be float32, float16 or 'bfloat16', got {dtype!r}")
    return dt, False


class BFloat16:
    """Marks a NumPy uint16 array as bfloat16 storage (NumPy has no bf16):
    ``nvfp4.bfloat16(u16_array)`` may be passed wherever a float tensor goes
    (input or out=). Results allocated with dtype='bfloat16' are plain uint16
    arrays; see to_bfloat16 / from_bfloat16."""

    __slots__ = ("array",)

    def __init__(self, array):
        array = np.asarray(array)
        if array.dtype != np.uint16:
            raise TypeError(f"bfloat16 storage must be a uint16 array, got {array.dtype}")
        self.array = array


class Float4:
    """Marks a C-contiguous uint8 array [..., K/2] of packed E2M1 pairs as the
    logical float4_e2m1fn tensor [..., K] (kDLFloat4_e2m1fn, 4 bits): what
    CheckpointWriter.add(name, nvfp4.float4(q), "F4") needs."""

    __slots__ = ("array",)

    def __init__(self, array):
        array = np.asarray(array)
        if array.dtype != np.uint8 or array.ndim < 1 or not array.flags["C_CONTIGUOUS"]:
            raise TypeError("float4 storage must be a C-contiguous uint8 array with ndim >= 1")
        self.array = array


def to_bfloat16(a):
    """float32 array -> uint16 bf16 bit patterns (round to nearest even; NaN kept quiet)."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32)
    rounded = (u + (0x7FFF + ((u >> 16) & 1))) >> 16
    nan = np.isnan(np.asarray(a, np.float32))
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(np.uint16)


def from_bfloat16(u16):
    """uint16 bf16 bit patterns -> float32 array."""
    return (np.asarray(u16, np.uint16).astype(np.uint32) << 16).view(np.float32)


# ------------------------------------------------------------------ capsules (CPython C API)
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_void_p, _CapsuleDestructor]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.c_void_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.c_void_p, ctypes.c_void_p]

# Capsule names must outlive every capsule: static buffers, never freed.
_NAMES = {n: ctypes.create_string_buffer(n) for n in
          (b"dltensor", b"dltensor_versioned", b"used_dltensor", b"used_dltensor_versioned")}
_PERMANENT = []  # objects deliberately kept until process exit (callbacks called from C)


def _permanent(obj):
    _PERMANENT.append(obj)
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))  # survive module teardown at exit
    return obj


def _name_ptr(name):
    return ctypes.addressof(_NAMES[name])


# ------------------------------------------------------------------ borrowed inputs
class Borrowed:
    """A DLTensor describing a caller's array for the duration of one call.
    `obj` is what the wrapper hands back (the caller's own array/tensor)."""

    __slots__ = ("obj", "tensor", "_keep", "_release", "read_only", "_shape")

    def __init__(self):
        self._keep = []
        self._release = None
        self.read_only = False
        self._shape = None

    @property
    def ptr(self):
        """The tensor as a call argument (byref: what the POINTER(DLTensor)
        parameters take, without building a pointer object)."""
        return ctypes.byref(self.tensor)

    @property
    def pointer(self):
        """A POINTER(DLTensor), for struct fields (NF4_state, Q4_weight_bundle)."""
        return ctypes.pointer(self.tensor)

    @property
    def shape(self):
        if self._shape is None:
            t = self.tensor
            self._shape = tuple(t.shape[i] for i in range(t.ndim))
        return self._shape

    @property
    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self):
        dt = self.tensor.dtype
        return (self.numel * dt.bits * dt.lanes + 7) // 8

    @property
    def is_float(self):
        return self.tensor.dtype.code in (_capi.kDLFloat, _capi.kDLBfloat)

    def release(self):
        rel, self._release = self._release, None
        self._keep = []
        if rel is not None:
            rel()


# Describing a NumPy array is most of a small call's time. Costs per call,
# NumPy 1.24 on CPython 3.11: arr.ctypes.data 0.9 us (it builds a ctypes
# helper object), a ctypes array type made for the shape 0.3 us, fresh
# DLDevice and DLDataType structs 0.2 us each. The data pointer is read
# from the array object instead (PyArrayObject: PyObject_HEAD, then
# `char *data`, NumPy's public C layout) once this interpreter has been
# checked to give arr.ctypes.data that way; elsewhere (PyPy, another
# layout, ndarray subclasses) arr.ctypes.data stays.
_SHAPE_TYPES = {}
_DTYPES = {}
_CPU_DEVICE = _capi.DLDevice(_capi.kDLCPU, 0)


def _shape_array(dims):
    n = len(dims)
    ty = _SHAPE_TYPES.get(n)
    if ty is None:
        ty = _SHAPE_TYPES[n] = ctypes.c_int64 * max(n, 1)
    return ty(*dims)


def _dl_dtype(code_bits):
    d = _DTYPES.get(code_bits)
    if d is None:
        d = _DTYPES[code_bits] = DLDataType(code_bits[0], code_bits[1], 1)
    return d


def _probe_data_offset():
    off = object.__basicsize__
    try:
        base = np.arange(64, dtype=np.float32)
        probes = (base, base[3:], base[::2], base.reshape(8, 8)[1:, 2:], np.ones((3, 5)).T,
                  np.frombuffer(bytes(16), np.uint8)[5:])
        for a in probes:
            if ctypes.c_void_p.from_address(id(a) + off).value != a.ctypes.data:
                return None
    except Exception:  # noqa: BLE001 - any surprise: keep the portable path
        return None
    return off


_DATA_OFFSET = _probe_data_offset()


def _data_address(arr):
    if _DATA_OFFSET is not None and type(arr) is np.ndarray:
        return ctypes.c_void_p.from_address(id(arr) + _DATA_OFFSET).value
    return arr.ctypes.data


def _from_numpy(arr, code_bits=None):
    b = Borrowed()
    b.obj = arr
    if code_bits is None:
        try:
            code_bits = _NP_TO_DL[arr.dtype]
        except KeyError:
            raise TypeError(f"unsupported NumPy dtype {arr.dtype}") from None
    dims = arr.shape
    shape = _shape_array(dims)
    strides = None
    flags = arr.flags
    if not flags.c_contiguous:
        if any(s % arr.itemsize for s in arr.strides):
            raise ValueError("array strides are not a multiple of the element size")
        strides = _shape_array(tuple(s // arr.itemsize for s in arr.strides))
    t = DLTensor()
    t.data = _data_address(arr) if arr.size else (_data_address(arr) or None)
    t.device = _CPU_DEVICE
    t.ndim = len(dims)
    t.dtype = _dl_dtype(code_bits)
    t.shape = shape
    t.strides = strides
    b.tensor = t
    b.read_only = not flags.writeable
    b._shape = dims
    b._keep = [arr, shape, strides]
    return b


def _call_dlpack(obj):
    try:
        return obj.__dlpack__(max_version=_capi.DLPACK_VERSION)
    except TypeError:  # producers before DLPack 1.0 (NumPy 1.24, PyTorch 1.13)
        return obj.__dlpack__()


def _from_dlpack_object(obj):
    capsule = _call_dlpack(obj)
    cid = id(capsule)
    b = Borrowed()
    b.obj = obj
    if _api.PyCapsule_IsValid(cid, b"dltensor_versioned"):
        ptr = _api.PyCapsule_GetPointer(cid, b"dltensor_versioned")
        _api.PyCapsule_SetName(cid, _name_ptr(b"used_dltensor_versioned"))
        managed = DLManagedTensorVersioned.from_address(ptr)
        b.read_only = bool(managed.flags & _capi.DLPACK_FLAG_BITMASK_READ_ONLY)
        mptr = ctypes.cast(ptr, ctypes.POINTER(DLManagedTensorVersioned))
    elif _api.PyCapsule_IsValid(cid, b"dltensor"):
        ptr = _api.PyCapsule_GetPointer(cid, b"dltensor")
        _api.PyCapsule_SetName(cid, _name_ptr(b"used_dltensor"))
        managed = DLManagedTensor.from_address(ptr)
        mptr = ctypes.cast(ptr, ctypes.POINTER(DLManagedTensor))
    else:
        raise TypeError(f"{type(obj).__name__}.__dlpack__ returned no unused DLPack capsule")
    b.tensor = managed.dl_tensor  # a view into the producer's struct

    def release(managed=managed, mptr=mptr, capsule=capsule):
        if managed.deleter:
            managed.deleter(mptr)

    b._release = release
    b._keep = [obj, capsule, managed]
    return b


def borrow(obj, name="tensor", *, output=False, allow_none=False):
    """Describes obj as a DLTensor without copying. Lists and scalars are
    converted with np.asarray (inputs only)."""
    if obj is None:
        if allow_none:
            return None
        raise TypeError(f"{name} must not be None")
    if isinstance(obj, Borrowed):
        return obj
    if isinstance(obj, BFloat16):
        b = _from_numpy(obj.array, (_capi.kDLBfloat, 16))
        b.obj = obj.array
    elif isinstance(obj, Float4):
        b = _from_numpy(obj.array)
        b.tensor.dtype = DLDataType(_capi.kDLFloat4_e2m1fn, 4, 1)
        b.tensor.shape[b.tensor.ndim - 1] *= 2
        b._shape = None
        b.obj = obj.array
    elif isinstance(obj, np.ndarray):
        b = _from_numpy(obj)
    elif hasattr(obj, "__dlpack__"):
        b = _from_dlpack_object(obj)
    elif output:
        raise TypeError(f"{name}: out= must be a NumPy array or an object with __dlpack__")
    else:
        b = _from_numpy(np.asarray(obj))
    if output and b.read_only:
        b.release()
        raise ValueError(f"{name}: output array is read-only")
    return b


class Args:
    """Collects the borrowed tensors of one call and releases them after it."""

    def __init__(self):
        self._items = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for b in reversed(self._items):
            b.release()
        self._items = []

    def add(self, obj, name="tensor", *, output=False, allow_none=False):
        b = borrow(obj, name, output=output, allow_none=allow_none)
        if b is not None:
            self._items.append(b)
        return b

    def out(self, out, name, shape, dtype):
        """Borrows out= when given. Else allocates the result where the call
        runs: a NumPy array (dtype as output_dtype), or, when an input of the
        call is a PyTorch tensor on a CUDA device, a torch tensor on that
        device (the library refuses ordinary host memory beside CUDA tensors)."""
        if out is not None:
            return self.add(out, name, output=True)
        np_dtype, bf16 = output_dtype(dtype) if not isinstance(dtype, np.dtype) or dtype.kind == "f" \
            else (dtype, False)
        shape = tuple(int(d) for d in shape)
        device = self._torch_cuda_device()
        if device is not None:
            torch_dtype = _torch_dtype(np_dtype, bf16)
            if torch_dtype is not None:
                import torch
                return self.add(torch.empty(shape, dtype=torch_dtype, device=device), name, output=True)
        arr = np.empty(shape, np_dtype)
        return self.add(BFloat16(arr) if bf16 else arr, name, output=True)

    def _torch_cuda_device(self):
        """The device of the first PyTorch CUDA tensor among the inputs, else None."""
        for b in self._items:
            if b.tensor.device.device_type == _capi.kDLCUDA and type(b.obj).__module__.split(".")[0] == "torch":
                return b.obj.device
        return None


def _torch_dtype(np_dtype, bf16):
    """The torch dtype of an output's NumPy storage dtype (None: none)."""
    import torch
    if bf16:
        return torch.bfloat16
    return {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16,
            np.dtype(np.uint8): torch.uint8, np.dtype(np.int8): torch.int8,
            np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64}.get(np.dtype(np_dtype))


def ptr_or_none(b):
    """A call argument: the tensor, or NULL."""
    return b.ptr if b is not None else None


def pointer_or_none(b):
    """A struct field: POINTER(DLTensor), or NULL."""
    return b.pointer if b is not None else None


# ------------------------------------------------------------------ library-owned tensors
_export_lock = threading.Lock()
_exports = {}  # key -> (owner Tensor, ctypes structs kept alive)
_keys = itertools.count(1)


def _release_export(key):
    try:
        with _export_lock:
            entry = _exports.pop(key, None)
            if entry is None:
                return
            owner = entry[0]
            owner._live_exports -= 1
            free = owner._released and owner._live_exports == 0
        if free:
            owner._free()
    except Exception:  # interpreter teardown
        pass


@_capi.DLManagedTensorVersionedDeleter
def _versioned_deleter(ptr):
    _release_export(ptr.contents.manager_ctx)


@_capi.DLManagedTensorDeleter
def _legacy_deleter(ptr):
    m = ptr.contents
    inner = ctypes.cast(m.manager_ctx, ctypes.POINTER(DLManagedTensorVersioned))
    if inner and inner.contents.deleter:
        inner.contents.deleter(inner)  # the versioned one owns everything


@_CapsuleDestructor
def _capsule_destructor(cid):
    # A capsule nobody consumed: still named "dltensor[_versioned]".
    if _api.PyCapsule_IsValid(cid, b"dltensor_versioned"):
        p = ctypes.cast(_api.PyCapsule_GetPointer(cid, b"dltensor_versioned"), ctypes.POINTER(DLManagedTensorVersioned))
        if p.contents.deleter:
            p.contents.deleter(p)
    elif _api.PyCapsule_IsValid(cid, b"dltensor"):
        p = ctypes.cast(_api.PyCapsule_GetPointer(cid, b"dltensor"), ctypes.POINTER(DLManagedTensor))
        if p.contents.deleter:
            p.contents.deleter(p)


for _cb in (_versioned_deleter, _legacy_deleter, _capsule_destructor):
    _permanent(_cb)

#: Set to False to force the ctypes-built legacy capsule even when the
#: library has Q4_dlpack_to_unversioned (tests use it).
use_library_unversioned = True


class Tensor:
    """A library-owned tensor (a mutable-tensor snapshot, a managed copy).

    It owns one DLManagedTensorVersioned and calls its deleter when the last
    of (this object, every capsule exported from it) is gone. Export it with
    np.from_dlpack(t) / torch.from_dlpack(t) any number of times (each export
    shares the memory), or view it with t.numpy() (read-only when the tensor
    is). Legacy consumers (NumPy < 2, PyTorch < 2.4) get unversioned capsules,
    which cannot carry the READ_ONLY flag: treat those arrays as read-only.
    """

    def __init__(self, managed_ptr, keep=None):
        self._ptr = managed_ptr  # POINTER(DLManagedTensorVersioned)
        self._live_exports = 0
        self._released = False
        self._keep = keep        # e.g. the session the snapshot counts in
        m = managed_ptr.contents
        t = m.dl_tensor
        self.flags = int(m.flags)
        self.read_only = bool(self.flags & _capi.DLPACK_FLAG_BITMASK_READ_ONLY)
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        self.device = (int(t.device.device_type), int(t.device.device_id))
        self.dl_dtype = (int(t.dtype.code), int(t.dtype.bits), int(t.dtype.lanes))

    def __del__(self):
        self._free()

    def _free(self):
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr and ptr.contents.deleter:
            ptr.contents.deleter(ptr)
        self._keep = None

    def release(self):
        """No further use through this object; the memory is freed now, or
        when the last export (capsule consumer, numpy() view) lets go."""
        with _export_lock:
            self._released = True
            free = self._live_exports == 0
        if free:
            self._free()

    @property
    def _tensor(self):
        if not self._ptr or self._released:
            raise ValueError("tensor already released")
        return self._ptr.contents.dl_tensor

    @property
    def data_ptr(self):
        t = self._tensor
        return (t.data or 0) + t.byte_offset

    def __dlpack_device__(self):
        return self.device

    def _export_versioned(self):
        """A new DLManagedTensorVersioned sharing the memory; keeps self alive until its deleter runs."""
        src = self._ptr.contents
        key = next(_keys)
        m = DLManagedTensorVersioned()
        m.version = _capi.DLPackVersion(*_capi.DLPACK_VERSION)
        m.manager_ctx = key
        m.deleter = _versioned_deleter
        m.flags = src.flags & ~_capi.DLPACK_FLAG_BITMASK_IS_COPIED
        ctypes.memmove(ctypes.addressof(m.dl_tensor), ctypes.addressof(src.dl_tensor), ctypes.sizeof(DLTensor))
        with _export_lock:
            _exports[key] = [self, m]
            self._live_exports += 1
        return m

    def _export_legacy(self):
        versioned = self._export_versioned()
        lib = _capi.get()
        vptr = ctypes.pointer(versioned)
        if use_library_unversioned and hasattr(lib, "Q4_dlpack_to_unversioned"):
            out = ctypes.POINTER(DLManagedTensor)()
            status = lib.Q4_dlpack_to_unversioned(vptr, ctypes.byref(out))
            if status != 0:
                versioned.deleter(vptr)
                from .errors import raise_for
                raise_for(status, lib, "Q4_dlpack_to_unversioned")
            return ctypes.addressof(out.contents)
        legacy = DLManagedTensor()
        legacy.dl_tensor = versioned.dl_tensor
        legacy.manager_ctx = ctypes.addressof(versioned)
        legacy.deleter = _legacy_deleter
        with _export_lock:
            _exports[versioned.manager_ctx].append(legacy)
        return ctypes.addressof(legacy)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self._tensor  # raises when released
        if copy:
            raise BufferError("nvfp4.Tensor exports its memory, copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != self.device:
            raise BufferError(f"tensor lives on device {self.device}, not {tuple(dl_device)}")
        if max_version is not None and max_version[0] >= 1:
            m = self._export_versioned()
            return _api.PyCapsule_New(ctypes.addressof(m), _name_ptr(b"dltensor_versioned"), _capsule_destructor)
        addr = self._export_legacy()
        return _api.PyCapsule_New(addr, _name_ptr(b"dltensor"), _capsule_destructor)

    def numpy(self):
        """A zero-copy NumPy view (CPU-accessible devices only); read-only when
        the tensor is. bf16 appears as uint16, fp8/fp4 as uint8 bytes."""
        t = self._tensor
        m = self._export_versioned()  # keeps the memory alive while the view lives
        return view_numpy(t, _ViewHolder(m.manager_ctx), writeable=not self.read_only)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    def __repr__(self):
        return f"nvfp4.{type(self).__name__}(shape={self.shape}, dtype={self.dl_dtype}, device={self.device}, read_only={self.read_only})"


class _ViewHolder:
    """Runs a callback when the last NumPy view that references it is gone."""

    __slots__ = ("key", "callback", "owner")

    def __init__(self, key=None, callback=None, owner=None):
        self.key = key
        self.callback = callback
        self.owner = owner

    def __del__(self):
        if self.key is not None:
            _release_export(self.key)
        if self.callback is not None:
            try:
                self.callback()
            except Exception:
                pass


def view_numpy(t, holder, writeable=True):
    """A zero-copy NumPy array over a DLTensor's CPU memory; `holder` (kept
    by the array) keeps the memory alive. bf16 -> uint16, fp8 -> uint8, fp4
    -> packed uint8 bytes (last dim halved when even, else flat)."""
    if t.device.device_type not in (_capi.kDLCPU, _capi.kDLCUDAHost, _capi.kDLCUDAManaged):
        raise BufferError(f"device type {t.device.device_type} is not CPU-accessible")
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    dt = dl_to_numpy_dtype(code, bits, lanes if bits >= 8 else 1)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    n = 1
    for d in shape:
        n *= d
    nbytes = (n * bits * lanes + 7) // 8
    strides = None
    if dt.itemsize * 8 != bits * lanes:  # sub-byte packed data
        shape = shape[:-1] + (shape[-1] // 2,) if shape and shape[-1] % 2 == 0 and lanes == 1 else (nbytes,)
    elif t.strides:
        strides = tuple(t.strides[i] * dt.itemsize for i in range(t.ndim))
    addr = (t.data or 0) + t.byte_offset
    if nbytes == 0 or not addr:
        arr = np.empty(shape, dt)
    else:
        buf = (ctypes.c_uint8 * nbytes).from_address(addr)
        buf._holder = holder
        arr = np.ndarray(shape, dt, buffer=buf, strides=strides)
    if not writeable:
        arr.flags.writeable = False
    return arr


_DL_FROM_NAME = {"bfloat16": (_capi.kDLBfloat, 16), "bf16": (_capi.kDLBfloat, 16)}


def dl_dtype(dtype):
    """'float32' / np.float16 / 'bfloat16' / 'uint8' ... -> DLDataType."""
    if isinstance(dtype, str) and dtype.lower() in _DL_FROM_NAME:
        code, bits = _DL_FROM_NAME[dtype.lower()]
    else:
        code, bits = _NP_TO_DL[np.dtype(dtype)]
    return DLDataType(code, bits, 1)
