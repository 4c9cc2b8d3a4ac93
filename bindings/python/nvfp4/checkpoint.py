"""safetensors checkpoints: zero-copy reader, atomic writer, linears from files."""
import ctypes
from dataclasses import dataclass

import numpy as np

from . import _capi
from ._dlpack import Args, BFloat16, Float4, _ViewHolder, view_numpy
from .errors import check, raise_for
from .schema import _new_summary, _raise_with_summary, _summary, dtype_name
from .session import Linear


@dataclass
class TensorInfo:
    name: str
    dtype: str  # safetensors dtype string: "F32", "U8", "F8_E4M3", "F4", ...
    shape: tuple
    nbytes: int


class Checkpoint:
    """A memory-mapped, validated .safetensors file (Q4_checkpoint).

    tensor(name) returns a read-only NumPy view into the mapping (no copy);
    close() is deferred until the last such view is gone."""

    def __init__(self, path):
        h = ctypes.c_void_p()
        check(_capi.get().Q4_checkpoint_open(str(path).encode(), ctypes.byref(h)), "Q4_checkpoint_open")
        self._h = h.value
        self._views = 0
        self._closing = False

    @property
    def handle(self):
        if not self._h or self._closing:
            raise ValueError("checkpoint is closed")
        return self._h

    def __len__(self):
        n = ctypes.c_size_t()
        check(_capi.get().Q4_checkpoint_count(self.handle, ctypes.byref(n)), "Q4_checkpoint_count")
        return n.value

    def _index(self, key):
        return key if isinstance(key, int) else self.find(key)

    def find(self, name):
        """Index of tensor `name` (NotFoundError when absent)."""
        i = ctypes.c_size_t()
        check(_capi.get().Q4_checkpoint_find(self.handle, name.encode(), ctypes.byref(i)), "Q4_checkpoint_find")
        return i.value

    def info(self, key):
        d = _capi.Q4_tensor_desc()
        nbytes = ctypes.c_int64()
        check(_capi.get().Q4_checkpoint_tensor_info(self.handle, self._index(key), ctypes.byref(d),
                                                    ctypes.byref(nbytes)), "Q4_checkpoint_tensor_info")
        return TensorInfo(d.name.decode("utf-8", "replace"), dtype_name(d.dtype), tuple(d.shape[:max(d.ndim, 0)]),
                          nbytes.value)

    def names(self):
        return [self.info(i).name for i in range(len(self))]

    def __contains__(self, name):
        return name in self.names()

    def tensor(self, key):
        """A read-only zero-copy NumPy view (BF16 as uint16, F8_E4M3 and F4 as uint8 bytes)."""
        t = _capi.DLTensor()
        check(_capi.get().Q4_checkpoint_tensor(self.handle, self._index(key), ctypes.byref(t)),
              "Q4_checkpoint_tensor")
        self._views += 1
        return view_numpy(t, _ViewHolder(callback=self._view_gone, owner=self), writeable=False)

    def _view_gone(self):
        self._views -= 1
        if self._closing and self._views == 0:
            self._really_close()

    def metadata(self, key):
        """A __metadata__ value (NotFoundError when absent)."""
        lib = _capi.get()
        needed = ctypes.c_size_t()
        status = lib.Q4_checkpoint_metadata(self.handle, key.encode(), None, 0, ctypes.byref(needed))
        if status not in (0, 13):
            raise_for(status, lib, "Q4_checkpoint_metadata")
        buf = ctypes.create_string_buffer(max(needed.value, 1))
        check(lib.Q4_checkpoint_metadata(self.handle, key.encode(), buf, len(buf), ctypes.byref(needed)),
              "Q4_checkpoint_metadata")
        return buf.value.decode("utf-8", "replace")

    def detect(self):
        """Schema summary of the file's tensors (SchemaError with .summary)."""
        s = _new_summary()
        status = _capi.get().Q4_checkpoint_detect(self.handle, ctypes.byref(s))
        _raise_with_summary(status, s, "Q4_checkpoint_detect")
        return _summary(s)

    def linear(self, session, prefix):
        """The linear stored under `prefix` (any detected schema family)."""
        h = ctypes.c_void_p()
        check(_capi.get().Q4_checkpoint_linear_create(session.handle, self.handle, prefix.encode(),
                                                      ctypes.byref(h)), "Q4_checkpoint_linear_create")
        return Linear(h.value, session)

    def close(self):
        if self._h and not self._closing:
            self._closing = True
            if self._views == 0:
                self._really_close()

    def _really_close(self):
        h, self._h = self._h, None
        if h:
            check(_capi.get().Q4_checkpoint_close(h), "Q4_checkpoint_close")

    def __del__(self):
        try:
            if getattr(self, "_h", None):
                _capi.get().Q4_checkpoint_close(self._h)
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_NP_TO_ST = {
    np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.float64): "F64",
    np.dtype(np.uint8): "U8", np.dtype(np.int8): "I8", np.dtype(np.int16): "I16", np.dtype(np.int32): "I32",
    np.dtype(np.int64): "I64", np.dtype(np.bool_): "BOOL", np.dtype(np.uint16): "U16",
    np.dtype(np.uint32): "U32", np.dtype(np.uint64): "U64",
}


class CheckpointWriter:
    """Builds a .safetensors file (tensors copied when added; commit() is atomic)."""

    def __init__(self):
        h = ctypes.c_void_p()
        check(_capi.get().Q4_checkpoint_writer_create(ctypes.byref(h)), "Q4_checkpoint_writer_create")
        self._h = h.value

    @property
    def handle(self):
        if not self._h:
            raise ValueError("writer is closed")
        return self._h

    def add(self, name, data, dtype=None):
        """Adds a compact CPU tensor (copied now). dtype: the file dtype ('F32',
        'BF16', 'U8', 'F8_E4M3', 'F4', ...); by default derived from the NumPy
        dtype. 'BF16' takes uint16 bits, 'F8_E4M3' uint8 bytes; 'F4' needs
        4-bit elements: pass nvfp4.float4(packed_uint8) (logical shape
        [..., 2 * last]) or a torch/DLPack float4 tensor."""
        if isinstance(data, np.ndarray) and dtype is not None and dtype.upper() == "F4":
            data = Float4(data)
        if dtype is None:
            if isinstance(data, Float4):
                dtype = "F4"
            arr = data.array if isinstance(data, (BFloat16, Float4)) else data
            if dtype is None:
                dtype = "BF16" if isinstance(data, BFloat16) else _NP_TO_ST.get(getattr(arr, "dtype", None))
            if dtype is None:
                raise TypeError(f"{name}: give dtype= for {getattr(arr, 'dtype', type(arr))}")
        with Args() as a:
            b = a.add(data, name)
            check(_capi.get().Q4_checkpoint_writer_add(self.handle, name.encode(), _capi.DTYPE_CODES[dtype.upper()],
                                                       b.ptr), "Q4_checkpoint_writer_add")

    def metadata(self, key, value):
        check(_capi.get().Q4_checkpoint_writer_metadata(self.handle, key.encode(), str(value).encode()),
              "Q4_checkpoint_writer_metadata")

    def commit(self, path):
        check(_capi.get().Q4_checkpoint_writer_commit(self.handle, str(path).encode()),
              "Q4_checkpoint_writer_commit")

    def close(self):
        if self._h:
            check(_capi.get().Q4_checkpoint_writer_destroy(self._h), "Q4_checkpoint_writer_destroy")
            self._h = None

    def __del__(self):
        try:
            if getattr(self, "_h", None):
                _capi.get().Q4_checkpoint_writer_destroy(self._h)
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
