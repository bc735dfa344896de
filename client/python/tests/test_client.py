"""The synchronous clusterkv.Client against a real clusterkv-server."""

import io
import os
import pathlib
import re
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

import clusterkv
from clusterkv import (Busy, Client, ClusterKvError, FailedPrecondition,
                       InvalidArgument, NotFound, ResourceExhausted,
                       Unavailable)
from conftest import MAX_PROMPT_TOKENS, REPO, wait_for

DOC = ("ClusterKV keeps the KV cache of a long document in clusters and "
       "recalls the relevant ones for every generated token. ") * 6
# Multi-byte characters (2, 3 and 4 bytes in UTF-8), to be cut mid-character
# by small chunk sizes.
UNICODE_DOC = "Grüße aus Köln — 世界 ☃ 🙂 naïve café. " * 12
GREEDY = dict(temperature=0.0, max_tokens=8, ignore_eos=True)


@pytest.fixture()
def client(server):
    with Client(server.address, timeout=60) as c:
        yield c


def test_the_installed_package_with_generated_stubs_is_tested():
    from clusterkv.v1 import clusterkv_pb2, clusterkv_pb2_grpc
    source = os.path.join(REPO, "client", "python", "src")
    assert not os.path.abspath(clusterkv.__file__).startswith(source)
    assert clusterkv_pb2.DESCRIPTOR.package == "clusterkv.v1"
    assert hasattr(clusterkv_pb2_grpc, "ClusterKvStub")


def test_server_info_describes_the_model(client):
    info = client.server_info()
    assert (info.architecture, info.layers, info.vocab_size) == ("llama", 2, 259)
    assert info.backend == "cpu"
    assert not info.draining
    assert info.raw.limits.max_prompt_tokens == MAX_PROMPT_TOKENS


def test_prefill_reports_progress_and_a_summary(client):
    progress = []
    with client.create_session() as session:
        summary = session.prefill(DOC, on_progress=progress.append)
        info = session.info()
    assert summary.prompt_tokens > len(DOC) // 2
    assert summary.session_tokens == summary.prompt_tokens == info.tokens
    assert progress, "no progress events"
    done = [p.tokens_done for p in progress]
    assert done == sorted(done)
    assert progress[-1] == (summary.prompt_tokens, summary.prompt_tokens)
    assert all(isinstance(p, clusterkv.Progress) for p in progress)


def test_add_bos_false_prefills_one_token_less(client):
    with client.create_session() as a, client.create_session() as b:
        with_bos = a.prefill(DOC).prompt_tokens
        assert b.prefill(DOC, add_bos=False).prompt_tokens == with_bos - 1


def first_answer(client, document, **prefill_options):
    with client.create_session(**GREEDY) as session:
        summary = session.prefill(document, **prefill_options)
        return summary.prompt_tokens, session.ask("Summary?").text()


def test_every_document_source_prefills_the_same_text(client, tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(UNICODE_DOC, encoding="utf-8")
    want = first_answer(client, UNICODE_DOC)
    data = UNICODE_DOC.encode("utf-8")
    sources = [data, path, io.BytesIO(data),
               io.StringIO(UNICODE_DOC)]
    for source in sources:
        # 5-byte chunks cut most multi-byte characters; the client cuts
        # between characters instead.
        assert first_answer(client, source, chunk_bytes=5) == want, source
    with open(path, "rb") as f:
        assert first_answer(client, f, chunk_bytes=7) == want


def test_missing_file_fails_before_any_call(client):
    with client.create_session() as session:
        with pytest.raises(FileNotFoundError):
            session.prefill(pathlib.Path("/nonexistent/doc.txt"))
        assert session.info().tokens == 0


class FailingFile(io.RawIOBase):
    """Reads one block, then fails."""

    def __init__(self):
        self.reads = 0

    def readable(self):
        return True

    def read(self, n=-1):
        self.reads += 1
        if self.reads == 1:
            return b"the first block of a document that cannot be read"
        raise OSError("disk on fire")


def test_input_error_cancels_the_prefill_without_prefilling(client):
    with client.create_session() as session:
        with pytest.raises(OSError, match="disk on fire"):
            session.prefill(FailingFile(), chunk_bytes=8)
        wait_for(lambda: not session.info().busy, 10, "the call to end")
        assert session.info().tokens == 0
        assert session.prefill(DOC).session_tokens > 0  # still usable


def test_a_failing_progress_callback_cancels_the_prefill(client):
    def fail(progress):
        raise RuntimeError("callback failed at %d" % progress.tokens_done)

    with client.create_session() as session:
        with pytest.raises(RuntimeError, match="callback failed"):
            session.prefill(DOC * 4, on_progress=fail)
        wait_for(lambda: not session.info().busy, 20, "the call to end")
        assert session.prefill(DOC).prompt_tokens > 0  # usable again


def test_ask_streams_text_pieces_and_a_summary(client):
    with client.create_session() as session:
        prefilled = session.prefill(DOC).session_tokens
        answer = session.ask("What is kept in clusters?", max_tokens=12,
                             ignore_eos=True, temperature=0.0)
        pieces = list(answer)
        summary = answer.summary
        assert all(isinstance(p, str) and p for p in pieces)
        assert "".join(pieces) == summary.text
        assert summary.generated_tokens == 12 == len(answer.token_ids)
        assert summary.finish_reason == "length"
        assert summary.input_tokens > 0
        assert summary.session_tokens == session.info().tokens
        assert summary.session_tokens >= prefilled + summary.input_tokens + 11
        # No question: the answer just continues.
        more = session.ask(max_tokens=3, ignore_eos=True).result()
        assert more.input_tokens == 0 and more.generated_tokens == 3


def test_session_sampling_defaults_apply_to_ask(client):
    with client.create_session(max_tokens=5, ignore_eos=True) as session:
        session.prefill(DOC)
        assert session.ask("Why?").result().generated_tokens == 5
        assert session.ask("Why?", max_tokens=2).result().generated_tokens == 2
        assert session.info().raw.sampling.max_tokens == 5


def test_forks_share_the_document_and_answer_alike(client):
    with client.create_session(**GREEDY) as parent:
        parent.prefill(DOC)
        tokens = parent.info().tokens
        with parent.fork() as a, parent.fork() as b:
            for child in (a, b):
                info = child.info()
                assert info.parent_session_id == parent.id
                assert info.tokens == tokens
                assert info.host_shared_bytes > 0
            assert a.id != b.id
            assert a.ask("Which?").text() == b.ask("Which?").text()
        # The parent is unaffected by its forks' answers.
        assert parent.info().tokens == tokens
        assert parent.ask("Which?").text()


def test_concurrent_questions_through_forks_in_threads(client):
    questions = ["First question?", "Second one?", "And a third?"]
    with client.create_session(**GREEDY) as parent:
        parent.prefill(DOC)

        def ask(question):
            with parent.fork() as fork:
                return fork.ask(question).result()

        with ThreadPoolExecutor(len(questions)) as pool:
            summaries = list(pool.map(ask, questions))
        # The same question asked alone gets the same greedy answer.
        with parent.fork() as fork:
            assert fork.ask(questions[1]).text() == summaries[1].text
    assert all(s.generated_tokens == 8 for s in summaries)


def test_context_manager_and_close(client):
    with client.create_session() as session:
        session_id = session.id
        assert client.session(session_id).id == session_id
        assert session_id in [s.session_id for s in client.list_sessions()]
    with pytest.raises(NotFound):
        client.session(session_id)
    assert session.close() == 0  # closing again does nothing
    other = client.create_session()
    other.prefill(DOC)
    assert other.close() > 0  # freed host bytes
    with pytest.raises(NotFound):
        other.info()


def test_generate_is_one_shot_and_reproducible(client):
    def run():
        answer = client.generate("Once upon a time", max_tokens=10,
                                 ignore_eos=True, temperature=0.8, seed=3)
        pieces = list(answer)
        assert "".join(pieces) == answer.summary.text
        return answer.summary

    first, second = run(), run()
    assert first.text == second.text
    assert first.generated_tokens == 10


class Recorder(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
               grpc.StreamStreamClientInterceptor):
    """Records (method, metadata) of every call."""

    def __init__(self):
        self.calls = []

    def _record(self, details):
        self.calls.append((details.method.rsplit("/", 1)[-1],
                           dict(details.metadata or ())))

    def intercept_unary_unary(self, continuation, details, request):
        self._record(details)
        return continuation(details, request)

    def intercept_unary_stream(self, continuation, details, request):
        self._record(details)
        return continuation(details, request)

    def intercept_stream_stream(self, continuation, details, requests):
        self._record(details)
        return continuation(details, requests)


def test_every_session_call_carries_x_session_id(server):
    recorder = Recorder()
    channel = grpc.intercept_channel(grpc.insecure_channel(server.address),
                                     recorder)
    client = Client.from_channel(channel, token="not-checked", timeout=60)
    with client.create_session(**GREEDY) as session:
        session.prefill(DOC)
        session.ask("Q?").result()
        with session.fork() as fork:
            fork.info()
        with pytest.raises(FailedPrecondition):  # no --snapshot-dir
            session.snapshot()
    client.generate("x", max_tokens=1).result()
    channel.close()

    (create, create_md), *rest = recorder.calls
    # CreateSession: a fresh routing key that starts the new session's id.
    assert create == "CreateSession"
    key = create_md["x-session-id"]
    assert re.fullmatch(r"[0-9a-f]{16}", key)
    assert session.id.startswith(key + ".")
    assert [(m, md.get("x-session-id")) for m, md in rest] == [
        ("Prefill", session.id), ("Decode", session.id),
        ("ForkSession", session.id), ("GetSession", fork.id),
        ("CloseSession", fork.id), ("SnapshotSession", session.id),
        ("CloseSession", session.id), ("Generate", None)]
    assert all(md["authorization"] == "Bearer not-checked"
               for _, md in recorder.calls)


def test_unknown_sampling_option_is_a_type_error(client):
    with pytest.raises(TypeError, match="temprature"):
        client.generate("x", temprature=0.5)
    with pytest.raises(TypeError, match="polcy"):
        client.create_session(kv={"polcy": "full"})


def test_errors_map_to_exception_classes(client):
    with pytest.raises(NotFound) as e:
        client.session("no-such-session")
    assert e.value.code == grpc.StatusCode.NOT_FOUND
    assert isinstance(e.value, ClusterKvError)
    assert isinstance(e.value.__cause__, grpc.RpcError)
    with pytest.raises(InvalidArgument):
        client.create_session(kv={"policy": "no-such-policy"})
    with pytest.raises(InvalidArgument):
        client.generate("x", top_p=0.0).result()
    with pytest.raises(InvalidArgument):
        client.generate("x", stop=[""]).result()
    with pytest.raises(ResourceExhausted, match="max_prompt_tokens"):
        client.generate("y" * (MAX_PROMPT_TOKENS + 10)).result()
    with client.create_session() as session:
        with pytest.raises(InvalidArgument):
            session.prefill("")


def test_closed_port_is_unavailable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Client("127.0.0.1:%d" % port, timeout=20) as c:
        with pytest.raises(Unavailable):
            c.server_info()


class GatedFile(io.RawIOBase):
    """One block, then waits for `gate` before the end of the file."""

    def __init__(self):
        self.gate = threading.Event()
        self.first = True

    def readable(self):
        return True

    def read(self, n=-1):
        if self.first:
            self.first = False
            return b"a document still arriving"
        self.gate.wait(30)
        return b""


def test_a_second_call_on_a_busy_session_is_busy(client):
    with client.create_session() as session:
        document = GatedFile()
        result = []
        worker = threading.Thread(
            target=lambda: result.append(
                session.prefill(document, chunk_bytes=8)))
        worker.start()
        try:
            wait_for(lambda: session.info().busy, 20, "the prefill to start")
            with pytest.raises(Busy) as e:
                session.ask("now?").result()
            assert e.value.code == grpc.StatusCode.ABORTED
        finally:
            document.gate.set()
            worker.join(30)
        assert result and result[0].prompt_tokens > 0


def test_cancelling_an_answer_frees_the_session(client):
    with client.create_session() as session:
        session.prefill(DOC)
        with session.ask("Long?", max_tokens=100000, ignore_eos=True) as answer:
            next(answer)
        with pytest.raises(clusterkv.Cancelled):
            next(answer)
        wait_for(lambda: not session.info().busy, 20, "the decode to stop")
        assert session.ask("Short?", max_tokens=2).result().generated_tokens <= 2
