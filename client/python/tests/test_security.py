"""TLS and bearer tokens: a server with --tls-cert/--tls-key and
--auth-tokens-file."""

import asyncio

import pytest

from clusterkv import AsyncClient, Client, Tls, Unauthenticated, Unavailable
from conftest import TOKEN
from test_client import DOC, GREEDY


def test_tls_and_token(secure_server, certificate):
    cert, _ = certificate
    with open(cert, "rb") as f:
        pem = f.read()
    for tls in (Tls(ca=cert), Tls(ca=pem)):
        with Client(secure_server.address, tls=tls, token=TOKEN,
                    timeout=60) as client:
            with client.create_session(**GREEDY) as session:
                assert session.prefill(DOC).session_tokens > 0
                assert session.ask("Q?").result().generated_tokens == 8


def test_missing_or_unknown_token_is_unauthenticated(secure_server, certificate):
    for token in (None, "tok-unknown"):
        with Client(secure_server.address, tls=Tls(ca=certificate[0]),
                    token=token, timeout=60) as client:
            with pytest.raises(Unauthenticated):
                client.create_session()


def test_plain_tcp_to_a_tls_server_is_unavailable(secure_server):
    with Client(secure_server.address, token=TOKEN, timeout=20) as client:
        with pytest.raises(Unavailable):
            client.server_info()


def test_async_client_with_tls_and_token(secure_server, certificate):
    async def main():
        async with AsyncClient(secure_server.address, tls=Tls(ca=certificate[0]),
                               token=TOKEN, timeout=60) as client:
            async with await client.create_session(**GREEDY) as session:
                await session.prefill(DOC)
                return await session.ask("Q?").text()

    assert isinstance(asyncio.run(main()), str)


def test_tls_needs_both_cert_and_key():
    with pytest.raises(ValueError):
        Client("127.0.0.1:1", tls=Tls(cert=b"x"))
