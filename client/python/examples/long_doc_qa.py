#!/usr/bin/env python3
"""Long-document QA with the clusterkv package: prefill one document once,
fork the session once per question, and ask all questions concurrently
(asyncio); each fork shares the document's KV cache on the server.

    python3 long_doc_qa.py --server 127.0.0.1:50051 [--doc FILE]
        [--question Q ...] [--max-tokens N] [--temperature T] [--seed S]
        [--token-file F] [--tls [--tls-ca PEM]]
"""

import argparse
import asyncio
import pathlib
import sys

import clusterkv

DEFAULT_QUESTIONS = [
    "What does this license allow?",
    "Who may distribute copies?",
    "What must accompany object code?",
]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", required=True, help="HOST:PORT of clusterkv-server")
    p.add_argument("--doc", type=pathlib.Path,
                   default=pathlib.Path("/usr/share/common-licenses/GPL-3"))
    p.add_argument("--question", action="append", dest="questions",
                   help="a question (repeatable; default: three about a license)")
    p.add_argument("--max-tokens", type=int, default=40)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--token-file", help="bearer token on the file's first line")
    p.add_argument("--tls", action="store_true", help="connect with TLS")
    p.add_argument("--tls-ca", help="PEM roots that verify the server")
    return p.parse_args(argv)


def connect(args):
    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.readline().strip()
    tls = clusterkv.Tls(ca=args.tls_ca) if args.tls or args.tls_ca else False
    return clusterkv.AsyncClient(args.server, token=token, tls=tls)


def show_progress(progress):
    print("\rprefill: %d/%d tokens" % progress, end="", file=sys.stderr,
          flush=True)


async def answer(session, question):
    """Asks on a fork of `session`; (question, summary)."""
    async with await session.fork() as fork:
        reply = fork.ask(question)
        async for _ in reply:  # pieces stream here; printed once complete
            pass
        return question, reply.summary


async def main(args):
    questions = args.questions or DEFAULT_QUESTIONS
    async with connect(args) as client:
        info = await client.server_info()
        print("server: model %s (%s, %d layers), backend %s" % (
            info.model_name or "?", info.architecture, info.layers, info.backend))
        async with await client.create_session(
                max_tokens=args.max_tokens, temperature=args.temperature,
                seed=args.seed) as session:
            summary = await session.prefill(args.doc, on_progress=show_progress)
            print(file=sys.stderr)
            print("prefilled %s: %d tokens in %.2f s (%.0f tok/s), %d clusters" % (
                args.doc, summary.prompt_tokens, summary.prefill_seconds,
                summary.tokens_per_second, summary.clusters_built))
            results = await asyncio.gather(
                *(answer(session, q) for q in questions))
    for question, s in results:
        print("\nQ: %s\nA: %s" % (question, s.text.strip()))
        print("   (%d tokens, first after %.3f s, %.1f tok/s, finish: %s)" % (
            s.generated_tokens, s.time_to_first_token_seconds,
            s.tokens_per_second, s.finish_reason))
    return 0


if __name__ == "__main__":
    arguments = parse_args()
    try:
        sys.exit(asyncio.run(main(arguments)))
    except (clusterkv.ClusterKvError, OSError) as e:
        print("long_doc_qa: %s" % e, file=sys.stderr)
        sys.exit(1)
