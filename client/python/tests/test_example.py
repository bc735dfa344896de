"""examples/long_doc_qa.py runs against a real server."""

import os
import subprocess
import sys

from conftest import EXAMPLES, TOKEN


def run_example(address, doc, *extra):
    return subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, "long_doc_qa.py"), "--server",
         address, "--doc", doc, "--max-tokens", "6", *extra],
        capture_output=True, text=True, timeout=120)


def test_long_doc_qa_asks_every_question_through_forks(server, tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text("A long document about clustered KV caches. " * 40)
    questions = ["What is it about?", "Who wrote it?", "Why clusters?"]
    args = [a for q in questions for a in ("--question", q)]
    p = run_example(server.address, str(doc), *args)
    assert p.returncode == 0, p.stderr
    assert "prefilled %s" % doc in p.stdout
    for q in questions:
        assert "Q: %s\nA: " % q in p.stdout
    assert p.stdout.count(" tokens, first after ") == 3


def test_long_doc_qa_with_tls_and_token(secure_server, certificate, tmp_path):
    doc = tmp_path / "doc.txt"
    doc.write_text("Short document. " * 20)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    p = run_example(secure_server.address, str(doc), "--tls-ca",
                    certificate[0], "--token-file", str(token_file))
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("\nQ: ") == 3  # the three default questions


def test_long_doc_qa_reports_errors_briefly(server, tmp_path):
    p = run_example(server.address, str(tmp_path / "missing.txt"))
    assert p.returncode == 1
    assert p.stderr.startswith("long_doc_qa: ") and "missing.txt" in p.stderr
    assert "Traceback" not in p.stderr
