#!/usr/bin/python3
"""Rewrites, in place, the INT32 tags of non-negative scalar metadata values
of a GGUF v3 file as UINT32 (same 4 bytes, so no offset moves), as
gguf_writer.py now writes them: llama.cpp refuses e.g. `general.alignment`
typed INT32. Usage: gguf_retag.py FILE... ; prints the keys it changed."""
import struct
import sys

_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STR, _ARR, _I32, _U32 = 8, 9, 5, 4


def _skip(data, pos, kind):
    """Returns the offset after a value of type `kind` at `pos`."""
    if kind == _STR:
        (n,) = struct.unpack_from("<Q", data, pos)
        return pos + 8 + n
    if kind == _ARR:
        elem, n = struct.unpack_from("<IQ", data, pos)
        pos += 12
        for _ in range(n):
            pos = _skip(data, pos, elem)
        return pos
    return pos + _SIZES[kind]


def retag(path):
    data = bytearray(open(path, "rb").read())
    magic, version, _, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    if magic != b"GGUF" or version != 3:
        raise ValueError(f"{path}: not a GGUF v3 file")
    pos, changed = 24, []
    for _ in range(n_kv):
        (n,) = struct.unpack_from("<Q", data, pos)
        key = data[pos + 8:pos + 8 + n].decode("utf-8")
        pos += 8 + n
        (kind,) = struct.unpack_from("<I", data, pos)
        if kind == _I32 and struct.unpack_from("<i", data, pos + 4)[0] >= 0:
            struct.pack_into("<I", data, pos, _U32)
            changed.append(key)
        pos = _skip(data, pos + 4, kind)
    open(path, "wb").write(data)
    return changed


if __name__ == "__main__":
    for f in sys.argv[1:]:
        print(f, ", ".join(retag(f)) or "(nothing to change)")
