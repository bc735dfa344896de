"""Results of ClusterKv calls as small typed records.

Each record keeps the protobuf message it came from in `raw`, so fields that
a newer server adds to the contract are reachable before this package names
them.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Union

PathOrPem = Union[str, "os.PathLike[str]", bytes]


@dataclass(frozen=True)
class Tls:
    """TLS settings of a channel. `ca`, `cert`, `key`: PEM contents (bytes)
    or a path to a PEM file (str or PathLike). `ca` None: the system's roots;
    `cert` and `key` (both or neither): a client certificate for mutual TLS;
    `server_name`: the name expected in the server's certificate when it
    differs from the address's host."""

    ca: Optional[PathOrPem] = None
    cert: Optional[PathOrPem] = None
    key: Optional[PathOrPem] = None
    server_name: Optional[str] = None


class Progress(NamedTuple):
    """Prefill progress: tokens processed so far of the call's total."""

    tokens_done: int
    tokens_total: int


def _scalars(cls, message, **extra):
    """cls built from message's fields of the same names, plus extra."""
    values = {}
    for field in dataclasses.fields(cls):
        if field.name in extra:
            values[field.name] = extra[field.name]
        elif field.name == "raw":
            values["raw"] = message
        else:
            values[field.name] = getattr(message, field.name)
    return cls(**values)


@dataclass(frozen=True)
class PrefillSummary:
    prompt_tokens: int      # tokens of this call
    session_tokens: int     # tokens in the session afterwards
    clusters_built: int
    segments: int
    prefill_seconds: float
    tokens_per_second: float
    queue_seconds: float
    raw: Any = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, m) -> "PrefillSummary":
        return _scalars(cls, m)


def finish_reason_name(enum_type, value: int) -> str:
    """"length", "eos", "stop", "unspecified", or the number as text for a
    value newer than this package."""
    known = enum_type.values_by_number.get(value)
    if known is None:
        return str(value)
    name = known.name
    prefix = "FINISH_REASON_"
    return (name[len(prefix):] if name.startswith(prefix) else name).lower()


@dataclass(frozen=True)
class DecodeSummary:
    finish_reason: str      # "length", "eos" or "stop"
    input_tokens: int       # appended input of this call
    generated_tokens: int
    session_tokens: int
    time_to_first_token_seconds: float
    tokens_per_second: float
    total_seconds: float
    text: str               # the whole generated text
    raw: Any = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, m) -> "DecodeSummary":
        enum_type = m.DESCRIPTOR.fields_by_name["finish_reason"].enum_type
        return _scalars(cls, m, finish_reason=finish_reason_name(
            enum_type, m.finish_reason))


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    tokens: int             # tokens in the KV cache
    clustered_tokens: int
    segments: int
    host_bytes: int         # host-tier KV referenced by the session
    host_shared_bytes: int  # part of host_bytes shared with forks
    device_bytes: int
    cache_hit_rate: float
    busy: bool              # a call is in progress
    parent_session_id: str  # "" unless a fork
    idle_ttl_seconds: int
    raw: Any = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, m) -> "SessionInfo":
        return _scalars(cls, m, host_bytes=m.memory.host_bytes,
                        host_shared_bytes=m.memory.host_shared_bytes,
                        device_bytes=m.memory.device_bytes,
                        cache_hit_rate=m.cache.hit_rate)


@dataclass(frozen=True)
class ServerInfo:
    model_name: str
    architecture: str
    layers: int
    vocab_size: int
    context_length: int
    backend: str            # "cpu" or "cuda"
    version: str
    draining: bool
    raw: Any = dataclasses.field(repr=False, compare=False)
    has_chat_template: bool = False  # Session.ask(..., chat=True) works

    @classmethod
    def from_proto(cls, m) -> "ServerInfo":
        model = m.model
        return _scalars(cls, m, model_name=model.name,
                        architecture=model.architecture, layers=model.layers,
                        vocab_size=model.vocab_size,
                        context_length=model.context_length)


@dataclass(frozen=True)
class SnapshotInfo:
    path: str               # the snapshot file on the server
    bytes: int
    seconds: float
    raw: Any = dataclasses.field(repr=False, compare=False)

    @classmethod
    def from_proto(cls, m) -> "SnapshotInfo":
        return _scalars(cls, m)
