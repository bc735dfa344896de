"""gRPC status codes of the ClusterKv contract as exception classes.

Every call of the client raises a `ClusterKvError` subclass instead of
`grpc.RpcError` (the original error is the exception's `__cause__`). Codes
without their own class raise `ClusterKvError` itself; `code` holds the
`grpc.StatusCode` (None for a protocol violation of the server).
"""

from __future__ import annotations

from typing import Dict, Optional, Type

import grpc


class ClusterKvError(Exception):
    """A failed call; `code` is its grpc.StatusCode, `details` the server's
    message."""

    def __init__(self, details: str, code: Optional[grpc.StatusCode] = None):
        name = code.name if code is not None else "ERROR"
        super().__init__("%s: %s" % (name, details))
        self.code = code
        self.details = details


class InvalidArgument(ClusterKvError):
    """Bad parameters or input (INVALID_ARGUMENT)."""


class NotFound(ClusterKvError):
    """Unknown (closed, expired or other tenant's) session (NOT_FOUND)."""


class Busy(ClusterKvError):
    """The session is busy with another call (ABORTED); retry later or fork."""


class ResourceExhausted(ClusterKvError):
    """A server limit or the queue is full (RESOURCE_EXHAUSTED)."""


class Unavailable(ClusterKvError):
    """The server is unreachable or draining (UNAVAILABLE)."""


class Unauthenticated(ClusterKvError):
    """Missing or unknown bearer token (UNAUTHENTICATED)."""


class PermissionDenied(ClusterKvError):
    """PERMISSION_DENIED."""


class FailedPrecondition(ClusterKvError):
    """E.g. a session snapshot that cannot be restored, or snapshots are off
    (FAILED_PRECONDITION)."""


class Cancelled(ClusterKvError):
    """The call was cancelled (CANCELLED)."""


class DeadlineExceeded(ClusterKvError):
    """The call's timeout passed (DEADLINE_EXCEEDED)."""


_BY_CODE: Dict[grpc.StatusCode, Type[ClusterKvError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ABORTED: Busy,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}


def from_rpc_error(error: grpc.RpcError) -> ClusterKvError:
    """The ClusterKvError for a failed gRPC call (sync or grpc.aio)."""
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    cls = _BY_CODE.get(code, ClusterKvError)
    return cls(details or "", code)
