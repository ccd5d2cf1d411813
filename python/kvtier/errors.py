"""The exceptions of kvtier: one class per status code of kvtierd and its client.

Every error a call into kvtier raises is a :class:`kvtier.Error` carrying the
status ``code`` (an int, as on the wire and in the C API), its ``code_name``
and the ``message`` (the daemon's words where the daemon refused).
"""

from __future__ import annotations


class Error(Exception):
    """A call into kvtier failed. ``code``, ``code_name`` and ``message`` say how."""

    code: int = -1
    code_name: str = "UNKNOWN"

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return f"{self.code_name}: {self.message}"


class NotFoundError(Error):
    """A key, lease or write the daemon does not know."""

    code, code_name = 1, "NOT_FOUND"


class InvalidArgumentError(Error, ValueError):
    """A malformed request: bad keys, a wrong data size, an invalid layout."""

    code, code_name = 2, "INVALID_ARGUMENT"


class LayoutError(InvalidArgumentError):
    """kvtierd refused the namespace's layout when attaching.

    The namespace (model, salt) is registered with another layout, or a block
    of this layout does not fit one of the daemon's tiers.
    """


class ResourceExhaustedError(Error):
    """A tier is full (every block in it pinned or reserved), or a limit was reached.

    The limits are per session (open leases and writes), or the daemon's
    (sessions, namespaces); the message names which.
    """

    code, code_name = 3, "RESOURCE_EXHAUSTED"


class IoError(Error):
    """The daemon's disk failed a read or a write."""

    code, code_name = 4, "IO_ERROR"


class CorruptionError(Error):
    """Stored bytes failed their checksum or format (never served)."""

    code, code_name = 5, "CORRUPTION"


class UnavailableError(Error, ConnectionError):
    """kvtierd cannot be reached, went away, or the session broke; reconnect with a new Client."""

    code, code_name = 6, "UNAVAILABLE"


class InternalError(Error):
    """An invariant did not hold: a bug in kvtier."""

    code, code_name = 7, "INTERNAL"


class FailedPreconditionError(Error):
    """The object is in the wrong state for the call (a closed client, a released lease)."""

    code, code_name = 8, "FAILED_PRECONDITION"


class PermissionDeniedError(Error, PermissionError):
    """kvtierd's allow lists refuse this process's user or group."""

    code, code_name = 9, "PERMISSION_DENIED"


_BY_CODE: dict[int, type[Error]] = {
    cls.code: cls
    for cls in (
        NotFoundError,
        InvalidArgumentError,
        ResourceExhaustedError,
        IoError,
        CorruptionError,
        UnavailableError,
        InternalError,
        FailedPreconditionError,
        PermissionDeniedError,
    )
}


def _from_status(code: int, message: str, at_attach: bool) -> Error:
    """The exception of a C++ Status (called by the extension module)."""
    if at_attach and code == InvalidArgumentError.code:
        return LayoutError(message)
    cls = _BY_CODE.get(code)
    return cls(message) if cls is not None else Error(message, code)
