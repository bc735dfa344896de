"""clusterkv.AsyncClient (grpc.aio) against a real clusterkv-server."""

import asyncio
import io

import grpc
import pytest

import clusterkv
from clusterkv import AsyncClient, Client, InvalidArgument, NotFound, ResourceExhausted
from conftest import MAX_PROMPT_TOKENS
from test_client import DOC, GREEDY, UNICODE_DOC, FailingFile


def run(coroutine_function, *args):
    """Runs coroutine_function(*args) in a fresh event loop (no
    pytest-asyncio needed)."""
    return asyncio.run(coroutine_function(*args))


def test_prefill_fork_and_concurrent_questions(server):
    questions = ["What is kept?", "What is recalled?", "When?"]

    async def main():
        progress = []
        async with AsyncClient(server.address, timeout=60) as client:
            info = await client.server_info()
            assert info.layers == 2
            async with await client.create_session(**GREEDY) as session:
                summary = await session.prefill(UNICODE_DOC, chunk_bytes=5,
                                                on_progress=progress.append)
                assert progress[-1] == (summary.prompt_tokens,) * 2

                async def ask(question):
                    async with await session.fork() as fork:
                        assert (await fork.info()).parent_session_id == session.id
                        answer = fork.ask(question)
                        pieces = [p async for p in answer]
                        assert "".join(pieces) == answer.summary.text
                        return answer.summary

                summaries = await asyncio.gather(*(ask(q) for q in questions))
                left = await client.list_sessions()
            return summary, summaries, session.id, left

    summary, summaries, session_id, left = run(main)
    assert [s.generated_tokens for s in summaries] == [8, 8, 8]
    # The session was open, its forks were closed.
    assert session_id in [s.session_id for s in left]
    assert not [s for s in left if s.parent_session_id == session_id]
    # The synchronous client gets the same greedy answer to the same input.
    with Client(server.address, timeout=60) as client:
        with client.create_session(**GREEDY) as session:
            assert session.prefill(UNICODE_DOC).prompt_tokens == summary.prompt_tokens
            assert session.ask(questions[2]).text() == summaries[2].text
        with pytest.raises(NotFound):
            client.session(session_id)


def test_generate_streams_like_the_sync_client(server):
    options = dict(max_tokens=6, ignore_eos=True, temperature=0.9, seed=21)

    async def main():
        async with AsyncClient(server.address) as client:
            answer = client.generate("Once upon a time", **options)
            pieces = [p async for p in answer]
            return "".join(pieces), answer.summary, answer.token_ids

    text, summary, ids = run(main)
    assert text == summary.text and len(ids) == 6
    with Client(server.address) as client:
        assert client.generate("Once upon a time", **options).text() == text


def test_errors_map_to_exception_classes(server):
    async def main():
        async with AsyncClient(server.address, timeout=60) as client:
            with pytest.raises(NotFound) as e:
                await client.session("no-such-session")
            assert e.value.code == grpc.StatusCode.NOT_FOUND
            with pytest.raises(InvalidArgument):
                await client.generate("x", top_p=0.0).result()
            with pytest.raises(ResourceExhausted):
                await client.generate("y" * (MAX_PROMPT_TOKENS + 10)).result()
            with pytest.raises(TypeError):
                await client.create_session(temprature=1.0)
            async with await client.create_session() as session:
                with pytest.raises(InvalidArgument):
                    await session.prefill(b"")
            with pytest.raises(NotFound):
                await session.info()  # closed on leaving the block

    run(main)


def test_input_error_cancels_the_prefill_without_prefilling(server):
    async def main():
        async with AsyncClient(server.address, timeout=60) as client:
            async with await client.create_session() as session:
                with pytest.raises(OSError, match="disk on fire"):
                    await session.prefill(FailingFile(), chunk_bytes=8)
                for _ in range(200):
                    if not (await session.info()).busy:
                        break
                    await asyncio.sleep(0.05)
                assert (await session.info()).tokens == 0
                return (await session.prefill(io.BytesIO(DOC.encode()))).session_tokens

    assert run(main) > 0


def test_cancelling_an_answer(server):
    async def main():
        async with AsyncClient(server.address, timeout=60) as client:
            async with await client.create_session() as session:
                await session.prefill(DOC)
                async with session.ask("Long?", max_tokens=100000,
                                       ignore_eos=True) as answer:
                    await answer.__anext__()
                with pytest.raises(clusterkv.Cancelled):
                    await answer.__anext__()
                for _ in range(400):
                    if not (await session.info()).busy:
                        break
                    await asyncio.sleep(0.05)
                short = await session.ask("Short?", max_tokens=2).result()
                return short.generated_tokens

    assert run(main) <= 2
