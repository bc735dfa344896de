"""Synchronous client of the ClusterKv gRPC service.

    with Client("127.0.0.1:50051") as client:
        with client.create_session(max_tokens=64) as session:
            session.prefill(pathlib.Path("doc.txt"))
            for piece in session.ask("What is it about?"):
                print(piece, end="", flush=True)

Thread-safe: one channel, one gRPC call per method call. Every session call
carries the `x-session-id` metadata (session affinity behind a proxy) and,
with a token, `authorization: Bearer TOKEN`. Errors are ClusterKvError
subclasses (clusterkv.errors).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from . import _common as c
from .errors import ClusterKvError, NotFound, Unavailable, from_rpc_error
from .types import (DecodeSummary, PrefillSummary, Progress, ServerInfo,
                    SessionInfo, SnapshotInfo, Tls)

ProgressCallback = Callable[[Progress], None]


class Answer(Iterator[str]):
    """A streaming answer: iterate for its text pieces (str) as they arrive.
    After the last piece `summary` holds the DecodeSummary and `token_ids` the
    generated token ids. The call runs on the server from the moment it is
    made; `cancel()` (or leaving a `with` block early) stops it."""

    def __init__(self, call):
        self._call = call
        self.summary: Optional[DecodeSummary] = None
        self.token_ids: List[int] = []

    def __iter__(self) -> "Answer":
        return self

    def __next__(self) -> str:
        while True:
            try:
                response = next(self._call)
            except StopIteration:
                if self.summary is None:
                    raise ClusterKvError("stream ended without a summary") from None
                raise
            except grpc.RpcError as e:
                raise from_rpc_error(e) from e
            event = response.WhichOneof("event")
            if event == "token":
                if response.token.id >= 0:
                    self.token_ids.append(response.token.id)
                if response.token.text:
                    return response.token.text
            elif event == "summary":
                self.summary = DecodeSummary.from_proto(response.summary)

    def result(self) -> DecodeSummary:
        """Reads the rest of the stream; the summary (its `text` is the whole
        answer)."""
        for _ in self:
            pass
        assert self.summary is not None
        return self.summary

    def text(self) -> str:
        """The whole answer text (reads the rest of the stream)."""
        return self.result().text

    def cancel(self) -> None:
        self._call.cancel()

    def __enter__(self) -> "Answer":
        return self

    def __exit__(self, *exc) -> None:
        if self.summary is None:
            self.cancel()


class Session:
    """A server session: a KV cache holding prefilled documents and the
    conversation so far. Use as a context manager to close it on exit."""

    def __init__(self, client: "Client", info: SessionInfo):
        self._client = client
        self.id = info.session_id
        self.created_info = info  # as returned by CreateSession/ForkSession
        self._closed = False

    def __repr__(self) -> str:
        return "Session(%r)" % self.id

    def prefill(self, text_or_file: c.Document, *,
                on_progress: Optional[ProgressCallback] = None,
                add_bos: Optional[bool] = None,
                chunk_bytes: int = c.DEFAULT_CHUNK_BYTES) -> PrefillSummary:
        """Appends a document as one clustered segment. text_or_file: str (the
        text itself), bytes (UTF-8), a path (pathlib.Path) or an open file;
        streamed in chunks of chunk_bytes. on_progress(Progress) is called in
        this thread as the server reports progress."""
        return self._client._prefill(self.id, text_or_file, on_progress,
                                     add_bos, chunk_bytes)

    def ask(self, question: Optional[Union[str, bytes]] = None, *,
            chat: bool = False, **sampling: Any) -> Answer:
        """Appends `question` (none: just continue) and streams the answer.
        chat=True: the question is a user turn rendered with the model's chat
        template (ServerInfo.has_chat_template; the session's earlier input
        must have been chat messages too). sampling: temperature, top_k, top_p, seed, max_tokens, stop,
        ignore_eos (unset: the session's defaults)."""
        request = c.decode_request(self.id, question, sampling, chat)
        return self._client._stream(self._client._stub.Decode, request, self.id)

    def fork(self) -> "Session":
        """A child session sharing this one's prefilled segments (KV memory
        counted once); this session stays usable."""
        info = self._client._unary(self._client._stub.ForkSession,
                                   c.pb.ForkSessionRequest(session_id=self.id),
                                   self.id)
        return Session(self._client, SessionInfo.from_proto(info))

    def info(self) -> SessionInfo:
        response = self._client._unary(self._client._stub.GetSession,
                                       c.pb.GetSessionRequest(session_id=self.id),
                                       self.id)
        return SessionInfo.from_proto(response)

    def snapshot(self) -> SnapshotInfo:
        """Writes the session to the server's --snapshot-dir now."""
        response = self._client._unary(
            self._client._stub.SnapshotSession,
            c.pb.SnapshotSessionRequest(session_id=self.id), self.id)
        return SnapshotInfo.from_proto(response)

    def close(self) -> int:
        """Closes the session on the server (once; later calls do nothing).
        Returns the host KV bytes freed."""
        if self._closed:
            return 0
        response = self._client._unary(self._client._stub.CloseSession,
                                       c.pb.CloseSessionRequest(session_id=self.id),
                                       self.id)
        self._closed = True
        return response.freed_host_bytes

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.close()
        except NotFound:  # already gone (expired, or closed elsewhere)
            pass


class Client:
    """A connection to clusterkv-server at `address` ("host:port").

    token: bearer token (servers with --auth-tokens-file). tls: False (plain
    TCP), True (TLS, system roots) or a Tls. timeout: deadline of each call
    in seconds (None: none). options: extra grpc channel options.
    """

    def __init__(self, address: str, *, token: Optional[str] = None,
                 tls: Union[bool, Tls] = False, timeout: Optional[float] = None,
                 options: Sequence[Tuple[str, Any]] = ()):
        if tls:
            credentials, tls_options = c.channel_credentials(tls)
            channel = grpc.secure_channel(address, credentials,
                                          list(options) + tls_options)
        else:
            channel = grpc.insecure_channel(address, list(options))
        self._init(channel, token, timeout)

    @classmethod
    def from_channel(cls, channel: grpc.Channel, *, token: Optional[str] = None,
                     timeout: Optional[float] = None) -> "Client":
        """A client over an existing channel (e.g. one with interceptors)."""
        client = cls.__new__(cls)
        client._init(channel, token, timeout)
        return client

    def _init(self, channel, token, timeout) -> None:
        self._channel = channel
        self._stub = c.pb_grpc.ClusterKvStub(channel)
        self._token = token
        self._timeout = timeout

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # Sessions.
    def create_session(self, *, kv: Optional[Mapping[str, Any]] = None,
                       idle_ttl_seconds: int = 0, **sampling: Any) -> Session:
        """A new empty session. kv: KV settings (policy, budget, sink_tokens,
        tokens_per_cluster, window, ...); sampling: the session's defaults
        (see Session.ask). Unset: the server's defaults."""
        request = c.create_request(kv, idle_ttl_seconds, sampling)
        for attempt in range(c.CREATE_ATTEMPTS):
            try:
                info = self._unary(self._stub.CreateSession, request,
                                   c.new_routing_key())
                return Session(self, SessionInfo.from_proto(info))
            except Unavailable:
                if attempt + 1 == c.CREATE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def session(self, session_id: str) -> Session:
        """The existing session `session_id` (checked with GetSession)."""
        info = self._unary(self._stub.GetSession,
                           c.pb.GetSessionRequest(session_id=session_id),
                           session_id)
        return Session(self, SessionInfo.from_proto(info))

    def list_sessions(self) -> List[SessionInfo]:
        response = self._unary(self._stub.ListSessions,
                               c.pb.ListSessionsRequest(), None)
        return [SessionInfo.from_proto(s) for s in response.sessions]

    def generate(self, prompt: Union[str, bytes], *,
                 kv: Optional[Mapping[str, Any]] = None,
                 add_bos: Optional[bool] = None, **sampling: Any) -> Answer:
        """One-shot: an ephemeral session prefilled with prompt, then decoded.
        Streams like Session.ask."""
        request = c.generate_request(prompt, kv, add_bos, sampling)
        return self._stream(self._stub.Generate, request, None)

    def server_info(self) -> ServerInfo:
        return ServerInfo.from_proto(self._unary(
            self._stub.GetServerInfo, c.pb.GetServerInfoRequest(), None))

    # Calls.
    def _metadata(self, session_id: Optional[str]) -> c.Metadata:
        return c.call_metadata(self._token, session_id)

    def _unary(self, method, request, session_id: Optional[str]):
        try:
            return method(request, metadata=self._metadata(session_id),
                          timeout=self._timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e

    def _stream(self, method, request, session_id: Optional[str]) -> Answer:
        try:
            call = method(request, metadata=self._metadata(session_id),
                          timeout=self._timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
        return Answer(call)

    def _prefill(self, session_id, document, on_progress, add_bos,
                 chunk_bytes) -> PrefillSummary:
        chunks = c.DocumentChunks(document, chunk_bytes)
        failure: List[BaseException] = []
        holder = []
        started = threading.Event()  # holder[0] is the call

        def requests():
            # An input error (e.g. reading the file) cancels the call and is
            # raised to the caller instead of the resulting CANCELLED.
            try:
                yield from c.prefill_requests(session_id, iter(chunks), add_bos)
            except Exception as e:  # noqa: BLE001 (re-raised below)
                failure.append(e)
                started.wait()
                holder[0].cancel()  # before half-close: nothing is prefilled

        summary = None
        try:
            call = self._stub.Prefill(requests(),
                                      metadata=self._metadata(session_id),
                                      timeout=self._timeout)
            holder.append(call)
            started.set()
            for response in call:
                event = response.WhichOneof("event")
                if event == "progress" and on_progress is not None:
                    on_progress(Progress(response.progress.tokens_done,
                                         response.progress.tokens_total))
                elif event == "summary":
                    summary = PrefillSummary.from_proto(response.summary)
        except grpc.RpcError as e:
            if failure:
                raise failure[0] from None
            raise from_rpc_error(e) from e
        finally:
            if summary is None and holder:
                holder[0].cancel()  # e.g. on_progress raised; no-op when done
            chunks.close()
        if failure:
            raise failure[0]
        if summary is None:
            raise ClusterKvError("Prefill stream ended without a summary")
        return summary
