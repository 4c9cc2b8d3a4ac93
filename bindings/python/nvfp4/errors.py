"""Exceptions: one nvfp4.Error subclass per Q4_ERR_* status code."""
from . import _capi


class Error(RuntimeError):
    """A libNVFP4 call failed. Attributes: status (the Q4_ERR_* code),
    status_string (Q4_status_string) and message (Q4_last_error(), read in
    the failing thread right after the call)."""

    status = None

    def __init__(self, status, status_string, message, function=None):
        self.status = status
        self.status_string = status_string
        self.message = message
        self.function = function
        super().__init__(f"{message or status_string} [{status_string}, status {status}]")


class InvalidArgumentError(Error, ValueError):
    status = 1


class NullPointerError(Error, ValueError):
    status = 2


class DtypeError(Error, TypeError):
    status = 3


class ShapeError(Error, ValueError):
    status = 4


class DeviceError(Error):
    status = 5


class StridesError(Error, ValueError):
    status = 6


class AlignmentError(Error, ValueError):
    status = 7


class SizeOverflowError(Error, OverflowError):
    status = 8


class AliasingError(Error, ValueError):
    status = 9


class NonFiniteError(Error, ValueError):
    status = 10


class UnsupportedError(Error):
    status = 11


class OutOfMemoryError(Error, MemoryError):
    status = 12


class BufferTooSmallError(Error):
    status = 13


class BusyError(Error):
    status = 14


class SchemaError(Error):
    status = 15


class NotFoundError(Error, LookupError):
    status = 16


class CudaError(Error):
    status = 17


class NotAvailableError(Error):
    status = 18


class FileError(Error, OSError):
    status = 19

    def __init__(self, *args, **kwargs):
        Error.__init__(self, *args, **kwargs)


class FormatError(Error, ValueError):
    status = 20


class StateError(Error):
    status = 21


class InternalError(Error):
    status = 99


#: status code -> exception class
ERRORS = {cls.status: cls for cls in Error.__subclasses__()}
assert sorted(ERRORS) == sorted(_capi.STATUS_NAMES), "one class per Q4_ERR_* code"

LibraryError = _capi.LibraryError


def raise_for(status, lib=None, function=None):
    """Raises the Error subclass for a nonzero status (reads Q4_last_error)."""
    if status == 0:
        return
    lib = lib or _capi.get()
    text = (lib.Q4_status_string(status) or b"").decode("utf-8", "replace")
    msg = (lib.Q4_last_error() or b"").decode("utf-8", "replace")
    raise ERRORS.get(status, Error)(status, text, msg, function)


def check(status, function=None):
    if status != 0:
        raise_for(status, None, function)
