"""asyncio client of the ClusterKv gRPC service (grpc.aio); the same API as
clusterkv.Client with coroutines and async iterators:

    async with AsyncClient("127.0.0.1:50051") as client:
        async with await client.create_session() as session:
            await session.prefill(pathlib.Path("doc.txt"))
            async for piece in session.ask("What is it about?"):
                print(piece, end="", flush=True)

Create it inside the event loop that uses it (grpc.aio channels belong to a
loop).
"""

from __future__ import annotations

import asyncio
from typing import (Any, AsyncIterator, Callable, List, Mapping, Optional,
                    Sequence, Tuple, Union)

import grpc

from . import _common as c
from .errors import Cancelled, ClusterKvError, NotFound, Unavailable, from_rpc_error
from .types import (DecodeSummary, PrefillSummary, Progress, ServerInfo,
                    SessionInfo, SnapshotInfo, Tls)

ProgressCallback = Callable[[Progress], None]


class AsyncAnswer(AsyncIterator[str]):
    """A streaming answer: `async for` its text pieces (str). After the last
    piece `summary` holds the DecodeSummary and `token_ids` the generated
    token ids. `cancel()` (or leaving an `async with` block early) stops it."""

    def __init__(self, call):
        self._call = call
        self._cancelled = False
        self.summary: Optional[DecodeSummary] = None
        self.token_ids: List[int] = []

    def __aiter__(self) -> "AsyncAnswer":
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                response = await self._call.read()
            except grpc.RpcError as e:
                raise from_rpc_error(e) from e
            except asyncio.CancelledError:
                if self._cancelled:  # our cancel(), not the task's
                    raise Cancelled("cancelled by the client",
                                    grpc.StatusCode.CANCELLED) from None
                raise
            if response is grpc.aio.EOF:
                if self.summary is None:
                    raise ClusterKvError("stream ended without a summary")
                raise StopAsyncIteration
            event = response.WhichOneof("event")
            if event == "token":
                if response.token.id >= 0:
                    self.token_ids.append(response.token.id)
                if response.token.text:
                    return response.token.text
            elif event == "summary":
                self.summary = DecodeSummary.from_proto(response.summary)

    async def result(self) -> DecodeSummary:
        """Reads the rest of the stream; the summary."""
        async for _ in self:
            pass
        assert self.summary is not None
        return self.summary

    async def text(self) -> str:
        return (await self.result()).text

    def cancel(self) -> None:
        self._cancelled = True
        self._call.cancel()

    async def __aenter__(self) -> "AsyncAnswer":
        return self

    async def __aexit__(self, *exc) -> None:
        if self.summary is None:
            self.cancel()


class AsyncSession:
    """A server session (see clusterkv.Session); `async with` closes it."""

    def __init__(self, client: "AsyncClient", info: SessionInfo):
        self._client = client
        self.id = info.session_id
        self.created_info = info
        self._closed = False

    def __repr__(self) -> str:
        return "AsyncSession(%r)" % self.id

    async def prefill(self, text_or_file: c.Document, *,
                      on_progress: Optional[ProgressCallback] = None,
                      add_bos: Optional[bool] = None,
                      chunk_bytes: int = c.DEFAULT_CHUNK_BYTES) -> PrefillSummary:
        """As Session.prefill; files are read in a worker thread."""
        return await self._client._prefill(self.id, text_or_file, on_progress,
                                           add_bos, chunk_bytes)

    def ask(self, question: Optional[Union[str, bytes]] = None, *,
            chat: bool = False, **sampling: Any) -> AsyncAnswer:
        request = c.decode_request(self.id, question, sampling, chat)
        return self._client._stream(self._client._stub.Decode, request, self.id)

    async def fork(self) -> "AsyncSession":
        info = await self._client._unary(
            self._client._stub.ForkSession,
            c.pb.ForkSessionRequest(session_id=self.id), self.id)
        return AsyncSession(self._client, SessionInfo.from_proto(info))

    async def info(self) -> SessionInfo:
        response = await self._client._unary(
            self._client._stub.GetSession,
            c.pb.GetSessionRequest(session_id=self.id), self.id)
        return SessionInfo.from_proto(response)

    async def snapshot(self) -> SnapshotInfo:
        response = await self._client._unary(
            self._client._stub.SnapshotSession,
            c.pb.SnapshotSessionRequest(session_id=self.id), self.id)
        return SnapshotInfo.from_proto(response)

    async def close(self) -> int:
        if self._closed:
            return 0
        response = await self._client._unary(
            self._client._stub.CloseSession,
            c.pb.CloseSessionRequest(session_id=self.id), self.id)
        self._closed = True
        return response.freed_host_bytes

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc) -> None:
        try:
            await self.close()
        except NotFound:
            pass


class AsyncClient:
    """clusterkv.Client for asyncio; the same arguments."""

    def __init__(self, address: str, *, token: Optional[str] = None,
                 tls: Union[bool, Tls] = False, timeout: Optional[float] = None,
                 options: Sequence[Tuple[str, Any]] = ()):
        if tls:
            credentials, tls_options = c.channel_credentials(tls)
            channel = grpc.aio.secure_channel(address, credentials,
                                              list(options) + tls_options)
        else:
            channel = grpc.aio.insecure_channel(address, list(options))
        self._init(channel, token, timeout)

    @classmethod
    def from_channel(cls, channel: grpc.aio.Channel, *,
                     token: Optional[str] = None,
                     timeout: Optional[float] = None) -> "AsyncClient":
        client = cls.__new__(cls)
        client._init(channel, token, timeout)
        return client

    def _init(self, channel, token, timeout) -> None:
        self._channel = channel
        self._stub = c.pb_grpc.ClusterKvStub(channel)
        self._token = token
        self._timeout = timeout

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def create_session(self, *, kv: Optional[Mapping[str, Any]] = None,
                             idle_ttl_seconds: int = 0,
                             **sampling: Any) -> AsyncSession:
        request = c.create_request(kv, idle_ttl_seconds, sampling)
        for attempt in range(c.CREATE_ATTEMPTS):
            try:
                info = await self._unary(self._stub.CreateSession, request,
                                         c.new_routing_key())
                return AsyncSession(self, SessionInfo.from_proto(info))
            except Unavailable:
                if attempt + 1 == c.CREATE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    async def session(self, session_id: str) -> AsyncSession:
        info = await self._unary(self._stub.GetSession,
                                 c.pb.GetSessionRequest(session_id=session_id),
                                 session_id)
        return AsyncSession(self, SessionInfo.from_proto(info))

    async def list_sessions(self) -> List[SessionInfo]:
        response = await self._unary(self._stub.ListSessions,
                                     c.pb.ListSessionsRequest(), None)
        return [SessionInfo.from_proto(s) for s in response.sessions]

    def generate(self, prompt: Union[str, bytes], *,
                 kv: Optional[Mapping[str, Any]] = None,
                 add_bos: Optional[bool] = None, **sampling: Any) -> AsyncAnswer:
        request = c.generate_request(prompt, kv, add_bos, sampling)
        return self._stream(self._stub.Generate, request, None)

    async def server_info(self) -> ServerInfo:
        return ServerInfo.from_proto(await self._unary(
            self._stub.GetServerInfo, c.pb.GetServerInfoRequest(), None))

    def _metadata(self, session_id: Optional[str]) -> c.Metadata:
        return c.call_metadata(self._token, session_id)

    async def _unary(self, method, request, session_id: Optional[str]):
        try:
            return await method(request, metadata=self._metadata(session_id),
                                timeout=self._timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e

    def _stream(self, method, request, session_id: Optional[str]) -> AsyncAnswer:
        return AsyncAnswer(method(request, metadata=self._metadata(session_id),
                                  timeout=self._timeout))

    async def _prefill(self, session_id, document, on_progress, add_bos,
                       chunk_bytes) -> PrefillSummary:
        chunks = c.DocumentChunks(document, chunk_bytes)
        messages = c.prefill_requests(session_id, iter(chunks), add_bos)
        call = self._stub.Prefill(metadata=self._metadata(session_id),
                                  timeout=self._timeout)
        summary = None
        writer = asyncio.ensure_future(self._write_all(call, messages))
        try:
            while True:
                try:
                    response = await call.read()
                except (grpc.RpcError, asyncio.CancelledError) as e:
                    # The writer cancelled the call on an input error: raise
                    # that error, not the cancellation.
                    if writer.done() and not writer.cancelled() and \
                            writer.exception() is not None:
                        raise writer.exception() from None
                    if isinstance(e, grpc.RpcError):
                        raise from_rpc_error(e) from e
                    raise
                if response is grpc.aio.EOF:
                    break
                event = response.WhichOneof("event")
                if event == "progress" and on_progress is not None:
                    on_progress(Progress(response.progress.tokens_done,
                                         response.progress.tokens_total))
                elif event == "summary":
                    summary = PrefillSummary.from_proto(response.summary)
            await writer  # an input error, raised here
        finally:
            if not writer.done():
                writer.cancel()
            if summary is None:
                call.cancel()  # e.g. on_progress raised; no-op when done
            chunks.close()
        if summary is None:
            raise ClusterKvError("Prefill stream ended without a summary")
        return summary

    @staticmethod
    async def _write_all(call, messages) -> None:
        """Writes the Prefill requests (reading files in a worker thread) and
        half-closes; an input error cancels the call before half-close, so
        nothing is prefilled, and is raised."""
        done = object()
        try:
            while True:
                message = await asyncio.to_thread(next, messages, done)
                if message is done:
                    break
                await call.write(message)
        except (grpc.RpcError, asyncio.InvalidStateError):
            return  # the call ended; the reader reports how
        except asyncio.CancelledError:
            raise
        except Exception:
            call.cancel()
            raise
        try:
            await call.done_writing()
        except (grpc.RpcError, asyncio.InvalidStateError):
            pass  # the call ended; the reader reports how
