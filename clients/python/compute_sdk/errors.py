"""Errors of the SDK: every failed call raises a ComputeError that keeps the gRPC status code.

The hierarchy follows the codes the service answers with (docs/api.md says which call
answers which), so that a caller can catch what it can handle::

    try:
        data = sandbox.files.read("out.txt")
    except NotFoundError:
        data = b""
"""
from __future__ import annotations

from typing import Dict, Optional, Type

import grpc

__all__ = [
    "ComputeError", "CancelledError", "InvalidArgumentError", "DeadlineExceededError",
    "NotFoundError", "AlreadyExistsError", "PermissionDeniedError", "ResourceExhaustedError",
    "FailedPreconditionError", "AbortedError", "OutOfRangeError", "UnimplementedError",
    "InternalError", "UnavailableError", "DataLossError", "UnauthenticatedError",
    "OutputLimitError", "error_from_rpc",
]


class ComputeError(Exception):
    """A call to the compute service failed.

    Attributes:
        code: the gRPC status code (grpc.StatusCode) the call ended with.
        details: the server's message (or the transport's, for a call that never reached it).
        request_id: the x-request-id the server logged the call under, when it sent one.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, details: str, code: Optional[grpc.StatusCode] = None,
                 request_id: Optional[str] = None) -> None:
        if code is not None:
            self.code = code
        self.details = details
        self.request_id = request_id
        super().__init__(f"{self.code.name}: {details}" +
                         (f" (request id {request_id})" if request_id else ""))


class CancelledError(ComputeError):
    """The call was cancelled (by this client, or at the server's shutdown)."""
    code = grpc.StatusCode.CANCELLED


class InvalidArgumentError(ComputeError, ValueError):
    """The request was refused as malformed (a bad id, path, limit or argument)."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceededError(ComputeError, TimeoutError):
    """The call's deadline passed (or the sandbox did not become ready in time)."""
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFoundError(ComputeError, LookupError):
    """An unknown sandbox, or a missing file."""
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(ComputeError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDeniedError(ComputeError, PermissionError):
    """E.g. a symlink in the workspace that leads outside it."""
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(ComputeError):
    """A cap was hit: a full workspace, a tenant's or a client's share of calls, a size."""
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPreconditionError(ComputeError):
    """The sandbox is FAILED or DESTROYED, or the path is a directory where a file is needed."""
    code = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(ComputeError):
    """The operation was abandoned; e.g. a file changed while it was read in chunks."""
    code = grpc.StatusCode.ABORTED


class OutOfRangeError(ComputeError):
    code = grpc.StatusCode.OUT_OF_RANGE


class UnimplementedError(ComputeError):
    code = grpc.StatusCode.UNIMPLEMENTED


class InternalError(ComputeError):
    code = grpc.StatusCode.INTERNAL


class UnavailableError(ComputeError, ConnectionError):
    """The service (or the node that holds the sandbox) cannot be reached now; retry later."""
    code = grpc.StatusCode.UNAVAILABLE


class DataLossError(ComputeError):
    code = grpc.StatusCode.DATA_LOSS


class UnauthenticatedError(ComputeError):
    code = grpc.StatusCode.UNAUTHENTICATED


class OutputLimitError(ResourceExhaustedError):
    """Sandbox.exec() collected more output than its max_output allows (the command was
    cancelled); use Sandbox.exec_stream() for output of any size."""


_BY_CODE: Dict[grpc.StatusCode, Type[ComputeError]] = {
    cls.code: cls for cls in (
        CancelledError, InvalidArgumentError, DeadlineExceededError, NotFoundError,
        AlreadyExistsError, PermissionDeniedError, ResourceExhaustedError,
        FailedPreconditionError, AbortedError, OutOfRangeError, UnimplementedError,
        InternalError, UnavailableError, DataLossError, UnauthenticatedError)
}


def _request_id(err: grpc.RpcError) -> Optional[str]:
    """The x-request-id of a failed call's metadata, if the server sent one."""
    for getter in ("initial_metadata", "trailing_metadata"):
        try:
            md = getattr(err, getter)()
        except Exception:  # not a grpc.Call, or no metadata at all
            continue
        for key, value in md or ():
            if key == "x-request-id":
                return value if isinstance(value, str) else value.decode(errors="replace")
    return None


def error_from_rpc(err: grpc.RpcError) -> ComputeError:
    """The ComputeError for a failed gRPC call: the subclass of its status code (ComputeError
    itself for a code without one), with its details and request id."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = (err.details() if hasattr(err, "details") else None) or str(err)
    cls = _BY_CODE.get(code, ComputeError)
    return cls(details, code=code, request_id=_request_id(err))
