"""Sessions, reusable linears, mutable tensors with snapshots."""
import ctypes
import json
from dataclasses import dataclass

from . import _capi
from ._dlpack import Args, Tensor, _ViewHolder, dl_dtype, pointer_or_none, view_numpy
from .errors import check, raise_for
from .ops import _BACKENDS, _MATH, _PATHS, _TARGETS, NF4State, _enum, layout_code
from .schema import format_name

_UM = {"disabled": 0, "prefer": 1, "require": 2}
_FORMATS = {"nvfp4": _capi.FORMAT_NVFP4, "nf4": _capi.FORMAT_NF4, "mxfp4": _capi.FORMAT_MXFP4}


def _text_query(fn, handle, what):
    """Size query then fill (the library's BUFFER_TOO_SMALL protocol)."""
    lib = _capi.get()
    needed = ctypes.c_size_t()
    status = fn(handle, None, 0, ctypes.byref(needed))
    if status not in (0, 13):
        raise_for(status, lib, what)
    buf = ctypes.create_string_buffer(max(needed.value, 1))
    check(fn(handle, buf, len(buf), ctypes.byref(needed)), what)
    return buf.value.decode("utf-8", "replace")


@dataclass
class SessionStats:
    live_linears: int
    live_mutables: int
    live_snapshots: int
    live_buffers: int
    live_bytes: int
    managed_bytes: int
    forwards: int
    implicit_copies: int


@dataclass
class LinearInfo:
    format: str
    backend: int
    compute_path: int
    fell_back: bool
    isa: int
    target: int
    unified_memory: bool
    scale_layout: int
    math_mode: int
    out_features: int
    in_features: int
    weight_bytes: int
    weight_version: int


class Session:
    """A libNVFP4 session (Q4_session). Everything created from it keeps it
    alive; close() fails with StateError while linears, mutable tensors or
    snapshots are alive. Enum arguments take names or Q4_* integers:
    compute_path, backend, target, math_mode as in nvfp4.options();
    unified_memory 'disabled' | 'prefer' | 'require'."""

    def __init__(self, *, compute_path=None, backend=None, target=None, device_id=None, unified_memory=None,
                 num_threads=None, diagnostics=None, math_mode=None):
        c = _capi.Q4_session_config()
        c.struct_size = ctypes.sizeof(c)
        lib = _capi.get()
        check(lib.Q4_session_config_init(ctypes.byref(c)), "Q4_session_config_init")
        if compute_path is not None:
            c.compute_path = _enum(compute_path, _PATHS, "compute_path")
        if backend is not None:
            c.backend = _enum(backend, _BACKENDS, "backend")
        if target is not None:
            c.target = _enum(target, _TARGETS, "target")
        if device_id is not None:
            c.device_id = int(device_id)
        if unified_memory is not None:
            c.unified_memory = _enum(unified_memory, _UM, "unified_memory")
        if num_threads is not None:
            c.num_threads = int(num_threads)
        if diagnostics is not None:
            c.diagnostics = int(bool(diagnostics))
        if math_mode is not None:
            c.math_mode = _enum(math_mode, _MATH, "math_mode")
        h = ctypes.c_void_p()
        check(lib.Q4_session_create(ctypes.byref(c), ctypes.byref(h)), "Q4_session_create")
        self._h = h.value

    @property
    def handle(self):
        if not self._h:
            raise ValueError("session is closed")
        return self._h

    def close(self):
        """Q4_session_destroy (StateError while objects created from it live)."""
        if self._h:
            check(_capi.get().Q4_session_destroy(self._h), "Q4_session_destroy")
            self._h = None

    def __del__(self):
        try:
            if getattr(self, "_h", None):
                _capi.get().Q4_session_destroy(self._h)
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def set_stream(self, stream):
        """Runs this session's forwards on `stream` (a cudaStream_t as an int, or None: the default stream)."""
        check(_capi.get().Q4_session_set_stream(self.handle, stream), "Q4_session_set_stream")

    def stats(self):
        s = _capi.Q4_session_stats()
        s.struct_size = ctypes.sizeof(s)
        check(_capi.get().Q4_session_get_stats(self.handle, ctypes.byref(s)), "Q4_session_get_stats")
        return SessionStats(s.live_linears, s.live_mutables, s.live_snapshots, s.live_buffers, s.live_bytes,
                            s.managed_bytes, s.forwards, s.implicit_copies)

    def diagnostics(self):
        """The session's JSON diagnostics, parsed."""
        return json.loads(_text_query(_capi.get().Q4_session_diagnostics, self.handle, "Q4_session_diagnostics"))

    # ---------------------------------------------------------------- linears
    def create_linear(self, bundle):
        """A Linear from a WeightBundle (the weight is copied; inputs borrowed for the call only)."""
        h = ctypes.c_void_p()
        with Args() as a:
            wb = bundle._struct(a)
            check(_capi.get().Q4_linear_create(self.handle, ctypes.byref(wb), ctypes.byref(h)), "Q4_linear_create")
        return Linear(h.value, self)

    def linear_nvfp4(self, qdata, scale, global_scale, *, out_features=None, in_features=None,
                     layout="linear", bias=None):
        return self.create_linear(WeightBundle.nvfp4(qdata, scale, global_scale, out_features=out_features,
                                                     in_features=in_features, layout=layout, bias=bias))

    def linear_mxfp4(self, qdata, scale, *, out_features=None, in_features=None, layout="linear", bias=None):
        return self.create_linear(WeightBundle.mxfp4(qdata, scale, out_features=out_features,
                                                     in_features=in_features, layout=layout, bias=bias))

    def linear_nf4(self, qdata, state, out_features, in_features, bias=None):
        return self.create_linear(WeightBundle.nf4(qdata, state, out_features, in_features, bias=bias))

    def linear_from_float(self, weight, format="nvfp4", *, global_scale=0.0, blocksize=0, bias=None):
        return self.create_linear(WeightBundle.from_float(weight, format, global_scale=global_scale,
                                                          blocksize=blocksize, bias=bias))

    # ---------------------------------------------------------------- mutable tensors
    def mutable(self, shape, dtype="float32"):
        """A zero-filled MutableTensor (version 0)."""
        return MutableTensor(self, shape, dtype)


class WeightBundle:
    """What a linear is created from (Q4_weight_bundle). Use the constructors
    nvfp4(), nf4() (packed) or from_float()."""

    def __init__(self, format, source, weight, *, out_features=0, in_features=0, scale=None, global_scale=0.0,
                 layout="linear", blocksize=0, nf4_state=None, bias=None):
        self.format = _enum(format, _FORMATS, "format")
        self.source = source
        self.weight = weight
        self.out_features, self.in_features = out_features, in_features
        self.scale, self.global_scale, self.layout = scale, global_scale, layout
        self.blocksize, self.nf4_state, self.bias = blocksize, nf4_state, bias

    @classmethod
    def nvfp4(cls, qdata, scale, global_scale, *, out_features=None, in_features=None, layout="linear", bias=None):
        """Packed NVFP4: qdata [N, K/2] (N, K inferred) or flat bytes with out_features/in_features."""
        shape = getattr(qdata, "shape", None)
        if out_features is None:
            out_features = int(shape[0])
        if in_features is None:
            in_features = int(shape[-1]) * 2
        return cls("nvfp4", _capi.WEIGHT_PACKED, qdata, out_features=out_features, in_features=in_features,
                   scale=scale, global_scale=global_scale, layout=layout, bias=bias)

    @classmethod
    def mxfp4(cls, qdata, scale, *, out_features=None, in_features=None, layout="linear", bias=None):
        """Packed MXFP4: qdata [N, K/2] (N, K inferred) and E8M0 scale bytes [N, K/32]
        (or swizzled), or flat bytes with out_features/in_features."""
        shape = getattr(qdata, "shape", None)
        if out_features is None:
            out_features = int(shape[0])
        if in_features is None:
            in_features = int(shape[-1]) * 2
        return cls("mxfp4", _capi.WEIGHT_PACKED, qdata, out_features=out_features, in_features=in_features,
                   scale=scale, layout=layout, bias=bias)

    @classmethod
    def nf4(cls, qdata, state, out_features, in_features, bias=None):
        return cls("nf4", _capi.WEIGHT_PACKED, qdata, out_features=out_features, in_features=in_features,
                   nf4_state=state, blocksize=state.blocksize, bias=bias)

    @classmethod
    def from_float(cls, weight, format="nvfp4", *, global_scale=0.0, blocksize=0, bias=None):
        """A float [N, K] weight the library quantizes (global_scale 0 = from amax)."""
        return cls(format, _capi.WEIGHT_FLOAT, weight, global_scale=global_scale, blocksize=blocksize, bias=bias)

    def _struct(self, args):
        b = _capi.Q4_weight_bundle()
        b.struct_size = ctypes.sizeof(b)
        check(_capi.get().Q4_weight_bundle_init(ctypes.byref(b)), "Q4_weight_bundle_init")
        b.format, b.source = self.format, self.source
        b.scale_layout = layout_code(self.layout)
        b.weight = args.add(self.weight, "weight").pointer
        b.out_features, b.in_features = int(self.out_features or 0), int(self.in_features or 0)
        b.scale = pointer_or_none(args.add(self.scale, "scale", allow_none=True))
        b.global_scale = float(self.global_scale)
        b.blocksize = int(self.blocksize or 0)
        if self.nf4_state is not None:
            st = self.nf4_state._struct(args)
            args._items.append(_Keep(st))
            b.nf4 = ctypes.pointer(st)
        b.bias = pointer_or_none(args.add(self.bias, "bias", allow_none=True))
        return b


class _Keep:
    """Keeps a ctypes struct alive in an Args list."""

    def __init__(self, obj):
        self.obj = obj

    def release(self):
        self.obj = None


class Linear:
    """A prepared 4-bit linear (Q4_linear): y = linear(x) or linear.forward(x, out=...)."""

    def __init__(self, handle, session):
        self._h = handle
        self.session = session  # keeps the session alive
        self.out_features = self.info().out_features  # fixed for the linear's life

    @property
    def handle(self):
        if not self._h:
            raise ValueError("linear is closed")
        return self._h

    def info(self):
        i = _capi.Q4_linear_info()
        i.struct_size = ctypes.sizeof(i)
        check(_capi.get().Q4_linear_info_get(self.handle, ctypes.byref(i)), "Q4_linear_info_get")
        return LinearInfo(format_name(i.format), i.backend, i.compute_path, bool(i.fell_back), i.isa, i.target,
                          bool(i.unified_memory), i.scale_layout, i.math_mode, i.out_features, i.in_features,
                          i.weight_bytes, i.weight_version)

    def forward(self, x, *, out=None, dtype="float32"):
        """out[..., N] = x[..., K] . W^T (+ bias)."""
        with Args() as a:
            bx = a.add(x, "x")
            bo = a.out(out, "out", bx.shape[:-1] + (self.out_features,), dtype)
            check(_capi.get().Q4_linear_forward(self.handle, bx.ptr, bo.ptr), "Q4_linear_forward")
            return bo.obj

    __call__ = forward

    def update_weight(self, bundle):
        """Atomically replaces the weight (same format, N and K)."""
        with Args() as a:
            wb = bundle._struct(a)
            check(_capi.get().Q4_linear_update_weight(self.handle, ctypes.byref(wb)), "Q4_linear_update_weight")

    def diagnostics(self):
        """The linear's JSON diagnostics, parsed."""
        return json.loads(_text_query(_capi.get().Q4_linear_diagnostics, self.handle, "Q4_linear_diagnostics"))

    def close(self):
        if self._h:
            check(_capi.get().Q4_linear_destroy(self._h), "Q4_linear_destroy")
            self._h = None

    def __del__(self):
        try:
            if getattr(self, "_h", None):
                _capi.get().Q4_linear_destroy(self._h)
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_MODES = {"keep": _capi.WRITE_KEEP, "discard": _capi.WRITE_DISCARD}


class Snapshot(Tensor):
    """A read-only snapshot of a MutableTensor (version .version): export it
    with np.from_dlpack / torch.from_dlpack or view it with .numpy()."""

    def __init__(self, ptr, version, keep):
        super().__init__(ptr, keep)
        self.version = version


class MutableTensor:
    """Q4_mutable: one writer at a time, any number of snapshot readers.

        with m.write() as buf:     # a writable NumPy view of a private buffer
            buf[...] = values      # committed on success, aborted on exception
        snap = m.acquire()         # read-only; np.from_dlpack(snap), torch.from_dlpack(snap)
    """

    def __init__(self, session, shape, dtype="float32"):
        shape = tuple(int(d) for d in shape)
        arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        h = ctypes.c_void_p()
        check(_capi.get().Q4_mutable_create(session.handle, len(shape), arr, dl_dtype(dtype), ctypes.byref(h)),
              "Q4_mutable_create")
        self._h = h.value
        self.session = session
        self.shape = shape
        self._view = None

    @property
    def handle(self):
        if not self._h:
            raise ValueError("mutable tensor is closed")
        return self._h

    @property
    def version(self):
        v = ctypes.c_uint64()
        check(_capi.get().Q4_mutable_version(self.handle, ctypes.byref(v)), "Q4_mutable_version")
        return v.value

    def begin_write(self, mode="keep"):
        """Starts a write -> writable NumPy view of the private buffer, valid
        until commit()/abort() (then it is made read-only). BusyError when
        another writer is active."""
        t = _capi.DLTensor()
        check(_capi.get().Q4_mutable_begin_write(self.handle, _enum(mode, _MODES, "mode"), ctypes.byref(t)),
              "Q4_mutable_begin_write")
        self._view = view_numpy(t, _ViewHolder(owner=self), writeable=True)
        return self._view

    def _end_view(self):
        if self._view is not None:
            self._view.flags.writeable = False
            self._view = None

    def commit(self):
        """Publishes the written buffer; returns the new version."""
        v = ctypes.c_uint64()
        check(_capi.get().Q4_mutable_commit(self.handle, ctypes.byref(v)), "Q4_mutable_commit")
        self._end_view()
        return v.value

    def abort(self):
        check(_capi.get().Q4_mutable_abort(self.handle), "Q4_mutable_abort")
        self._end_view()

    class _Write:
        def __init__(self, m, mode):
            self.m, self.mode = m, mode

        def __enter__(self):
            return self.m.begin_write(self.mode)

        def __exit__(self, exc_type, *rest):
            if exc_type is None:
                self.version = self.m.commit()
            else:
                self.m.abort()

    def write(self, mode="keep"):
        """Context manager: begin_write, then commit (or abort on an exception)."""
        return MutableTensor._Write(self, mode)

    def acquire(self):
        """A Snapshot of the current version (stays unchanged whatever is committed later)."""
        p = ctypes.POINTER(_capi.DLManagedTensorVersioned)()
        v = ctypes.c_uint64()
        check(_capi.get().Q4_mutable_acquire(self.handle, ctypes.byref(p), ctypes.byref(v)), "Q4_mutable_acquire")
        return Snapshot(p, v.value, self.session)

    def close(self):
        if self._h:
            check(_capi.get().Q4_mutable_destroy(self._h), "Q4_mutable_destroy")
            self._h = None

    def __del__(self):
        try:
            if getattr(self, "_h", None):
                _capi.get().Q4_mutable_destroy(self._h)
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["Session", "SessionStats", "Linear", "LinearInfo", "WeightBundle", "MutableTensor", "Snapshot",
           "NF4State"]
