"""Document chunking of Session.prefill (no server): every source gives the
same bytes, in chunks of at most chunk_bytes, cut between UTF-8 characters."""

import io
import random

import pytest

from clusterkv._common import DocumentChunks


def random_text(seed, length):
    rng = random.Random(seed)
    # 1, 2, 3 and 4 bytes per character in UTF-8.
    return "".join(rng.choice("aé世🙂 \n") for _ in range(length))


@pytest.mark.parametrize("chunk_bytes", [4, 5, 7, 64, 1 << 16])
def test_sources_give_the_same_bytes_in_whole_characters(chunk_bytes, tmp_path):
    text = random_text(chunk_bytes, 3000)
    data = text.encode("utf-8")
    path = tmp_path / "doc.txt"
    path.write_bytes(data)
    for source in (text, data, path, io.BytesIO(data), io.StringIO(text)):
        chunks = DocumentChunks(source, chunk_bytes)
        pieces = list(chunks)
        chunks.close()
        assert b"".join(pieces) == data, source
        assert all(0 < len(p) <= chunk_bytes for p in pieces), source
        for p in pieces:
            p.decode("utf-8")  # raises when a character was cut


def test_invalid_utf8_passes_through_unchanged():
    data = b"ok\x80\x80\x80\x80\x80\x80\xffend"
    assert b"".join(DocumentChunks(data, 4)) == data


def test_bad_arguments():
    with pytest.raises(TypeError):
        DocumentChunks(12345)
    with pytest.raises(ValueError):
        DocumentChunks("text", chunk_bytes=3)
    with pytest.raises(FileNotFoundError):
        import pathlib
        DocumentChunks(pathlib.Path("/nonexistent/file"))
