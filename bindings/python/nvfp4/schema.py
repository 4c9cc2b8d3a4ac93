"""Checkpoint schema detection from tensor names (plus dtype/shape when known)."""
import ctypes
from dataclasses import dataclass, field

from . import _capi
from .errors import Error, raise_for


def _s(b):
    return (b or b"").decode("utf-8", "replace")


def dtype_code(dtype):
    """A safetensors dtype string ('F32', 'U8', 'F8_E4M3', ...) or Q4_DTYPE_* int -> int."""
    if dtype is None:
        return 0
    if isinstance(dtype, str):
        return _capi.DTYPE_CODES[dtype.upper()]
    return int(dtype)


def schema_name(family):
    return _s(_capi.get().Q4_schema_name(int(family)))


def format_name(fmt):
    return _s(_capi.get().Q4_format_name(int(fmt)))


def dtype_name(dtype):
    return _s(_capi.get().Q4_dtype_name(dtype_code(dtype)))


@dataclass
class SchemaSummary:
    format: str
    family: str
    num_linears: int
    num_incomplete: int
    family_counts: dict = field(default_factory=dict)


@dataclass
class LinearSchema:
    prefix: str
    format: str
    family: str
    roles: dict  # role name -> tensor name
    global_scale_inverted: bool


def _descs(tensors):
    """tensors: names, (name, dtype, shape) tuples, or a dict name -> (dtype, shape)."""
    if isinstance(tensors, dict):
        tensors = [(k,) + tuple(v) for k, v in tensors.items()]
    items = []
    for t in tensors:
        if isinstance(t, str):
            t = (t, None, None)
        name, dtype, shape = (tuple(t) + (None, None))[:3]
        items.append((name, dtype, shape))
    arr = (_capi.Q4_tensor_desc * max(len(items), 1))()
    names = []
    for i, (name, dtype, shape) in enumerate(items):
        enc = name.encode()
        names.append(enc)
        arr[i].name = enc
        arr[i].dtype = dtype_code(dtype)
        if shape is None:
            arr[i].ndim = -1
        else:
            if len(shape) > _capi.Q4_MAX_NDIM:
                raise ValueError(f"{name}: more than {_capi.Q4_MAX_NDIM} dimensions")
            arr[i].ndim = len(shape)
            for j, d in enumerate(shape):
                arr[i].shape[j] = int(d)
    return arr, len(items), names, [n for n, _, _ in items]


def _summary(s):
    counts = {schema_name(i): s.family_counts[i] for i in range(8) if s.family_counts[i]}
    return SchemaSummary(format_name(s.format), schema_name(s.family), s.num_linears, s.num_incomplete, counts)


def _new_summary():
    s = _capi.Q4_schema_summary()
    s.struct_size = ctypes.sizeof(s)
    return s


def detect_schema(tensors):
    """-> SchemaSummary. SchemaError (with .summary) when a linear is
    incomplete, ambiguous or has a wrong dtype/shape."""
    arr, n, _keep, _names = _descs(tensors)
    s = _new_summary()
    status = _capi.get().Q4_detect_schema(arr, n, ctypes.byref(s))
    _raise_with_summary(status, s, "Q4_detect_schema")
    return _summary(s)


def _raise_with_summary(status, s, fn):
    if status:
        try:
            raise_for(status, None, fn)
        except Error as e:
            e.summary = _summary(s)
            raise


def detect_linears(tensors):
    """-> [LinearSchema] of the complete 4-bit linears, in order of appearance."""
    arr, n, _keep, names = _descs(tensors)
    lib = _capi.get()
    found = ctypes.c_size_t()
    status = lib.Q4_detect_linears(arr, n, None, 0, ctypes.byref(found))
    if status not in (0, 13):  # Q4_ERR_BUFFER_TOO_SMALL expected when linears exist
        raise_for(status, lib, "Q4_detect_linears")
    cap = found.value
    out = (_capi.Q4_linear_schema * max(cap, 1))()
    for e in out:
        e.struct_size = ctypes.sizeof(_capi.Q4_linear_schema)
    if cap:
        status = lib.Q4_detect_linears(arr, n, out, cap, ctypes.byref(found))
        if status:
            raise_for(status, lib, "Q4_detect_linears")
    result = []
    for e in out[:cap]:
        roles = {_capi.ROLE_NAMES[r]: names[e.roles[r]] for r in range(_capi.Q4_ROLE_COUNT) if e.roles[r] >= 0}
        prefix = names[e.prefix_tensor].encode()[:e.prefix_len].decode("utf-8", "replace")
        result.append(LinearSchema(prefix, format_name(e.format), schema_name(e.family), roles,
                                   bool(e.global_scale_inverted)))
    return result
