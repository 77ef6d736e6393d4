"""hetex.Error and one subclass per hx_status.

Every failing call of the C library returns a status (or NULL) and leaves a
thread-local message; the binding raises the subclass of the status with
that message. Each class also derives from the builtin exception closest in
meaning (ShapeError is a ValueError, DtypeError a TypeError, ...), so code
that catches the builtin ones keeps working.
"""
import builtins

from ._lib import ffi, lib


class Error(Exception):
    """A failure reported by hetex. `status` is the hx_status value, `status_name`
    its name (e.g. "HX_ERR_SHAPE"), str(e) the library's message."""

    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        if status is not None:
            self.status = status

    @property
    def status_name(self):
        return ffi.string(lib.hx_status_name(self.status)).decode()

    def __str__(self):  # KeyError and OSError would quote or reformat it
        return self.args[0] if self.args else ""


class InvalidArgumentError(Error, ValueError):
    status = lib.HX_ERR_INVALID_ARGUMENT


class ShapeError(Error, ValueError):
    status = lib.HX_ERR_SHAPE


class DtypeError(Error, TypeError):
    status = lib.HX_ERR_DTYPE


class NotFoundError(Error, KeyError):
    status = lib.HX_ERR_NOT_FOUND


class IndexError(Error, builtins.IndexError):  # noqa: A001
    status = lib.HX_ERR_INDEX


class OutOfMemoryError(Error, MemoryError):
    status = lib.HX_ERR_OUT_OF_MEMORY


class DeviceOOMError(Error, MemoryError):
    status = lib.HX_ERR_DEVICE_OOM


class NoKernelError(Error, NotImplementedError):
    status = lib.HX_ERR_NO_KERNEL


class NumericError(Error, ArithmeticError):
    status = lib.HX_ERR_NUMERIC


class IOError(Error, builtins.OSError):  # noqa: A001
    status = lib.HX_ERR_IO


class CorruptError(Error, ValueError):
    status = lib.HX_ERR_CORRUPT


class StateError(Error, RuntimeError):
    status = lib.HX_ERR_STATE


class UnsupportedError(Error, NotImplementedError):
    status = lib.HX_ERR_UNSUPPORTED


class InternalError(Error, RuntimeError):
    status = lib.HX_ERR_INTERNAL


class CommError(Error, RuntimeError):
    status = lib.HX_ERR_COMM


_BY_STATUS = {c.status: c for c in (
    InvalidArgumentError, ShapeError, DtypeError, NotFoundError, IndexError, OutOfMemoryError,
    DeviceOOMError, NoKernelError, NumericError, IOError, CorruptError, StateError,
    UnsupportedError, InternalError, CommError)}


def error_for(status, message):
    """The exception for `status` (an unknown value gives Error itself)."""
    cls = _BY_STATUS.get(status)
    return cls(message) if cls else Error(message, status)


def last_error():
    """The library's message of this thread's last failure."""
    return ffi.string(lib.hx_last_error()).decode("utf-8", "replace")


def check(status):
    """Raises the status's exception with the library's message unless HX_OK."""
    if status != lib.HX_OK:
        raise error_for(status, last_error())


def check_ptr(p):
    """Returns p, or raises for a NULL result with the failure hx_last_status names."""
    if p == ffi.NULL:
        raise error_for(lib.hx_last_status(), last_error())
    return p
