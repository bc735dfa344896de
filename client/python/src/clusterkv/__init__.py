"""Python client of the ClusterKV inference service.

`Client` (threads) and `AsyncClient` (asyncio) talk to clusterkv-server over
its gRPC contract (proto/clusterkv/v1/clusterkv.proto, whose generated stubs
are `clusterkv.v1`): create a session, prefill a long document once, fork it,
and stream answers to many questions. Failed calls raise the classes of
`clusterkv.errors`.
"""

from .aio import AsyncAnswer, AsyncClient, AsyncSession
from .client import Answer, Client, Session
from .errors import (Busy, Cancelled, ClusterKvError, DeadlineExceeded,
                     FailedPrecondition, InvalidArgument, NotFound,
                     PermissionDenied, ResourceExhausted, Unauthenticated,
                     Unavailable)
from .types import (DecodeSummary, PrefillSummary, Progress, ServerInfo,
                    SessionInfo, SnapshotInfo, Tls)

__version__ = "0.1.0"

__all__ = [
    "Answer", "AsyncAnswer", "AsyncClient", "AsyncSession", "Busy",
    "Cancelled", "Client", "ClusterKvError", "DeadlineExceeded",
    "DecodeSummary", "FailedPrecondition", "InvalidArgument", "NotFound",
    "PermissionDenied", "PrefillSummary", "Progress", "ResourceExhausted",
    "ServerInfo", "Session", "SessionInfo", "SnapshotInfo", "Tls",
    "Unauthenticated", "Unavailable",
]
