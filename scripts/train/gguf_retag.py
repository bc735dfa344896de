#!/usr/bin/python3
"""Rewrites, in place, the INT32 tags of non-negative scalar metadata values
of a GGUF v3 file as UINT32 (same 4 bytes, so no offset moves), as
gguf_writer.py now writes them: llama.cpp refuses e.g. `general.alignment`
typed INT32. Usage: gguf_retag.py FILE... ; prints the keys it changed."""
import struct
import sys

from gguf_reader import _Cursor
from gguf_writer import _I32, _U32


def retag(path):
    data = bytearray(open(path, "rb").read())
    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    c = _Cursor(data)
    c.pos = 4
    _, _, n_kv = c.take("<IQQ")
    changed = []
    for _ in range(n_kv):
        key = c.string()
        tag_at = c.pos
        kind = c.take("<I")
        value = c.value(kind)
        if kind == _I32 and value >= 0:
            struct.pack_into("<I", data, tag_at, _U32)
            changed.append(key)
    open(path, "wb").write(data)
    return changed


if __name__ == "__main__":
    for f in sys.argv[1:]:
        print(f, ", ".join(retag(f)) or "(nothing to change)")
