"""Reads back what gguf_writer.py writes (GGUF v3, F32/F16 tensors):
metadata values and tensors as numpy arrays, from the same public format
description. Used to compute reference logits from exactly the stored
(F16-rounded) weights."""
import struct

import numpy as np

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
            7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STR, _ARR = 8, 9
_DTYPES = {0: np.float32, 1: np.float16}


class _Cursor:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, kind):
        if kind == _STR:
            return self.string()
        if kind == _ARR:
            elem, n = self.take("<I"), self.take("<Q")
            return [self.value(elem) for _ in range(n)]
        return self.take(_SCALARS[kind])


def read(path):
    """Returns (metadata dict, {name: np.ndarray}) with arrays shaped as
    gguf_writer.write was given them (GGUF dims reversed)."""
    with open(path, "rb") as f:
        data = f.read()
    c = _Cursor(data)
    if data[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    c.pos = 4
    _, n_tensors, n_kv = c.take("<IQQ")
    meta = {}
    for _ in range(n_kv):
        key = c.string()
        meta[key] = c.value(c.take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = c.string()
        dims = [c.take("<Q") for _ in range(c.take("<I"))]
        kind, offset = c.take("<IQ")
        infos.append((name, dims, kind, offset))
    align = meta.get("general.alignment", 32)
    base = c.pos + (-c.pos) % align
    tensors = {}
    for name, dims, kind, offset in infos:
        dtype = np.dtype(_DTYPES[kind])
        count = int(np.prod(dims))
        arr = np.frombuffer(data, dtype=dtype, count=count,
                            offset=base + offset)
        tensors[name] = arr.reshape(list(reversed(dims)))
    return meta, tensors
