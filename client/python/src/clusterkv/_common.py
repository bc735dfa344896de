"""Pieces shared by the synchronous and the asyncio client: the generated
stubs, call metadata, request builders, document chunking and channel
credentials. Private to the package."""

from __future__ import annotations

import io
import os
import secrets
from typing import Any, Iterator, Mapping, Optional, Tuple, Union

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

try:
    from clusterkv.v1 import clusterkv_pb2 as pb
    from clusterkv.v1 import clusterkv_pb2_grpc as pb_grpc
except ImportError as e:  # a source checkout, not an installed package
    raise ImportError(
        "clusterkv: the generated gRPC stubs (clusterkv.v1) are missing; "
        "install the package (pip install ./client/python), which generates "
        "them from proto/") from e

from .types import Tls

__all__ = ["pb", "pb_grpc"]

# Metadata that routes every call of a session (deploy/README.md "Session
# affinity"); on CreateSession it carries a fresh routing key that the server
# puts at the start of the new session's id.
SESSION_ID_METADATA = "x-session-id"
# CreateSession attempts: UNAVAILABLE (the key's replica is down or draining)
# created nothing, so it is retried with a fresh key, reaching another replica.
CREATE_ATTEMPTS = 3
DEFAULT_CHUNK_BYTES = 64 * 1024

Metadata = Tuple[Tuple[str, str], ...]
Document = Union[str, bytes, "os.PathLike[str]", io.IOBase, Any]


def new_routing_key() -> str:
    return secrets.token_hex(8)


def call_metadata(token: Optional[str], session_id: Optional[str]) -> Metadata:
    md = []
    if session_id:
        md.append((SESSION_ID_METADATA, session_id))
    if token:
        md.append(("authorization", "Bearer " + token))
    return tuple(md)


def fill(message: Message, options: Mapping[str, Any], what: str) -> Message:
    """Sets message's fields from options by field name; None values stay
    unset (the server's or session's defaults apply). Works for fields added
    to the contract later. TypeError names an unknown option."""
    fields = message.DESCRIPTOR.fields_by_name
    for name, value in options.items():
        if value is None:
            continue
        field = fields.get(name)
        if field is None:
            raise TypeError("unknown %s option %r (known: %s)" % (
                what, name, ", ".join(sorted(fields))))
        if field.label == field.LABEL_REPEATED:
            if isinstance(value, (str, bytes)):
                value = [value]
            target = getattr(message, name)
            del target[:]
            target.extend(value)
        elif field.message_type is not None:
            target = getattr(message, name)
            if isinstance(value, Message):
                target.CopyFrom(value)
            else:
                json_format.ParseDict(value, target)
        else:
            setattr(message, name, value)
    return message


def sampling_params(options: Mapping[str, Any]):
    """SamplingParams from keyword options (temperature, top_k, top_p, seed,
    max_tokens, stop, ignore_eos, and any field added later)."""
    return fill(pb.SamplingParams(), options, "sampling")


def kv_config(options: Optional[Mapping[str, Any]]):
    """KvConfig from a mapping (policy, budget, sink_tokens, ...)."""
    return fill(pb.KvConfig(), options or {}, "kv")


def set_text(message: Message, field_name: str, data: bytes) -> None:
    """Sets a text field from UTF-8 bytes, whether the contract declares it
    `bytes` or `string`."""
    field = message.DESCRIPTOR.fields_by_name[field_name]
    if field.type == field.TYPE_BYTES:
        setattr(message, field_name, data)
    else:
        setattr(message, field_name, data.decode("utf-8"))


def _utf8_cut(buffer: bytes, end: int, floor: int) -> int:
    """end (< len(buffer)) moved back, by at most 3 bytes and not to floor,
    so that buffer[end] starts a UTF-8 character; end itself when the bytes
    there are not UTF-8 (the server rejects those anyway)."""
    cut = end
    while cut > max(floor, end - 3) and (buffer[cut] & 0xC0) == 0x80:
        cut -= 1
    return cut if cut > floor and (buffer[cut] & 0xC0) != 0x80 else end


class DocumentChunks:
    """A document as UTF-8 chunks of at most chunk_bytes, cut between
    characters. Accepts str (the text itself), bytes (UTF-8), a path
    (os.PathLike; opened now, so a missing file fails before any call), or
    an open file (binary or text). Iterate once; close() closes a file it
    opened."""

    def __init__(self, document: Document, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        if chunk_bytes < 4:
            raise ValueError("chunk_bytes must be >= 4")
        self._chunk_bytes = chunk_bytes
        self._owned = None
        self._file = None
        self._data = None
        if isinstance(document, str):
            self._data = document.encode("utf-8")
        elif isinstance(document, (bytes, bytearray, memoryview)):
            self._data = bytes(document)
        elif isinstance(document, os.PathLike):
            self._owned = self._file = open(document, "rb")
        elif hasattr(document, "read"):
            self._file = document
        else:
            raise TypeError("prefill wants str, bytes, a path (os.PathLike) "
                            "or an open file, not %s" % type(document).__name__)

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
            self._owned = None

    def _reads(self) -> Iterator[bytes]:
        if self._data is not None:
            yield self._data
            return
        while True:
            block = self._file.read(self._chunk_bytes)
            if not block:
                return
            yield block.encode("utf-8") if isinstance(block, str) else block

    def __iter__(self) -> Iterator[bytes]:
        size = self._chunk_bytes
        pending = b""
        for block in self._reads():
            buffer = pending + block if pending else block
            start = 0
            while len(buffer) - start > size:
                cut = _utf8_cut(buffer, start + size, start)
                yield buffer[start:cut]
                start = cut
            pending = buffer[start:]
        if pending:
            yield pending


def prefill_requests(session_id: str, chunks: Iterator[bytes],
                     add_bos: Optional[bool]) -> Iterator[Message]:
    """The Prefill request stream: the first message names the session (and
    add_bos), every message carries one chunk. An empty document still sends
    the naming message (the server answers INVALID_ARGUMENT)."""
    first = pb.PrefillRequest(session_id=session_id)
    if add_bos is not None:
        first.add_bos = add_bos
    sent = False
    for chunk in chunks:
        message = first if not sent else pb.PrefillRequest()
        set_text(message, "text", chunk)
        yield message
        sent = True
    if not sent:
        yield first


def generate_request(prompt: Union[str, bytes], kv: Optional[Mapping[str, Any]],
                     add_bos: Optional[bool], sampling: Mapping[str, Any]):
    request = pb.GenerateRequest(sampling=sampling_params(sampling))
    if kv:
        request.kv.CopyFrom(kv_config(kv))
    if add_bos is not None:
        request.add_bos = add_bos
    data = prompt.encode("utf-8") if isinstance(prompt, str) else bytes(prompt)
    set_text(request, "prompt", data)
    return request


def decode_request(session_id: str, question: Optional[Union[str, bytes]],
                   sampling: Mapping[str, Any], chat: bool = False):
    request = pb.DecodeRequest(session_id=session_id,
                               sampling=sampling_params(sampling))
    if question:
        data = question.encode("utf-8") if isinstance(question, str) else bytes(question)
        if chat:  # a user turn, rendered by the server's chat template
            request.messages.messages.add(role=b"user", content=data)
        else:
            set_text(request, "text", data)
    return request


def create_request(kv: Optional[Mapping[str, Any]], idle_ttl_seconds: int,
                   sampling: Mapping[str, Any]):
    request = pb.CreateSessionRequest(sampling=sampling_params(sampling),
                                      idle_ttl_seconds=idle_ttl_seconds)
    if kv:
        request.kv.CopyFrom(kv_config(kv))
    return request


def _pem(value) -> Optional[bytes]:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    with open(value, "rb") as f:
        return f.read()


def channel_credentials(tls: Union[bool, Tls]) -> Tuple[grpc.ChannelCredentials, list]:
    """Credentials and channel options for tls=True (system roots) or a Tls."""
    settings = Tls() if tls is True else tls
    if (settings.cert is None) != (settings.key is None):
        raise ValueError("Tls: give both cert and key (mutual TLS) or neither")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_pem(settings.ca), private_key=_pem(settings.key),
        certificate_chain=_pem(settings.cert))
    options = []
    if settings.server_name:
        options.append(("grpc.ssl_target_name_override", settings.server_name))
    return credentials, options
