"""A minimal GGUF v3 writer (metadata + F32/F16 tensors), written from the
public format description: header, key/value metadata, tensor infos, then
tensor data aligned to `general.alignment` (32) bytes."""
import struct

import numpy as np

ALIGN = 32
_U32, _I32, _F32, _BOOL, _STR, _ARR, _U64 = 4, 5, 6, 7, 8, 9, 10
GGML_F32, GGML_F16 = 0, 1


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(v):
    if isinstance(v, bool):
        return struct.pack("<I?", _BOOL, v)
    if isinstance(v, int):
        # llama.cpp reads counts and sizes (general.alignment,
        # *.context_length, ...) as UINT32 and refuses an INT32 tag.
        if 0 <= v < 2**32:
            return struct.pack("<II", _U32, v)
        return struct.pack("<Ii", _I32, v) if -2**31 <= v < 0 else \
            struct.pack("<IQ", _U64, v)
    if isinstance(v, float):
        return struct.pack("<If", _F32, v)
    if isinstance(v, str):
        return struct.pack("<I", _STR) + _str(v)
    if isinstance(v, list):
        if all(isinstance(x, str) for x in v):
            return struct.pack("<IIQ", _ARR, _STR, len(v)) + b"".join(
                _str(x) for x in v)
        if all(isinstance(x, int) for x in v):
            return struct.pack("<IIQ", _ARR, _I32, len(v)) + struct.pack(
                f"<{len(v)}i", *v)
    raise TypeError(f"unsupported metadata value {type(v)}")


def write(path, metadata, tensors):
    """metadata: {key: value}; tensors: [(name, np.ndarray)] in C order; an
    array of shape (rows, cols) becomes GGUF dims (cols, rows). float16
    arrays are stored as F16, everything else as F32."""
    infos, blobs, offset = [], [], 0
    for name, arr in tensors:
        arr = np.ascontiguousarray(arr)
        kind = GGML_F16 if arr.dtype == np.float16 else GGML_F32
        if kind == GGML_F32:
            arr = arr.astype(np.float32)
        dims = list(reversed(arr.shape))
        info = _str(name) + struct.pack("<I", len(dims))
        info += b"".join(struct.pack("<Q", d) for d in dims)
        info += struct.pack("<IQ", kind, offset)
        infos.append(info)
        data = arr.tobytes()
        pad = (-len(data)) % ALIGN
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    with open(path, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(metadata)))
        for k, v in metadata.items():
            f.write(_str(k) + _value(v))
        for info in infos:
            f.write(info)
        f.write(b"\0" * ((-f.tell()) % ALIGN))
        for blob in blobs:
            f.write(blob)
