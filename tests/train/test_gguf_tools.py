#!/usr/bin/python3
"""scripts/train's GGUF writer, reader and retagger: values round-trip with
the tags llama.cpp expects (non-negative ints UINT32), the retagger turns a
file written the old way (INT32) into the new writer's bytes and is
idempotent, the committed models need no retagging, and the engine reads a
written file (`clusterkv-model info`).
Usage: test_gguf_tools.py REPO_ROOT CLUSTERKV_MODEL_BINARY"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

REPO, MODEL_TOOL = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(REPO, "scripts", "train"))
import gguf_reader  # noqa: E402
import gguf_retag  # noqa: E402
import gguf_writer  # noqa: E402

META = {"general.architecture": "llama", "general.alignment": 32,
        "llama.context_length": 2048, "neg": -3, "big": 2**40, "f": 0.5,
        "b": True, "tokens": ["a", "b"], "ids": [1, -2]}


def tags(path):
    """{key: GGUF value type} of a file's metadata."""
    data = open(path, "rb").read()
    c = gguf_reader._Cursor(data)
    c.pos = 4
    _, _, n_kv = c.take("<IQQ")
    out = {}
    for _ in range(n_kv):
        key = c.string()
        kind = c.take("<I")
        c.value(kind)
        out[key] = kind
    return out


class GgufToolsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def write(self, name, meta=META):
        path = os.path.join(self.dir, name)
        w = np.arange(6, dtype=np.float32).reshape(2, 3)
        h = np.array([1.5, -2.0, 0.25, 8.0], dtype=np.float16)
        gguf_writer.write(path, meta, [("w", w), ("h", h)])
        return path

    def test_round_trip_and_tags(self):
        path = self.write("a.gguf")
        meta, tensors = gguf_reader.read(path)
        self.assertEqual(meta, META)
        np.testing.assert_array_equal(tensors["w"],
                                      np.arange(6).reshape(2, 3))
        self.assertEqual(tensors["h"].dtype, np.float16)
        self.assertEqual(list(tensors["h"]), [1.5, -2.0, 0.25, 8.0])
        t = tags(path)
        self.assertEqual(t["general.alignment"], gguf_writer._U32)
        self.assertEqual(t["llama.context_length"], gguf_writer._U32)
        self.assertEqual(t["neg"], gguf_writer._I32)
        self.assertEqual(t["big"], gguf_writer._U64)

    def test_retag_turns_old_files_into_new_ones(self):
        new = self.write("new.gguf")
        # The old writer: every int that fits as INT32.
        value = gguf_writer._value

        def old_value(v):
            if isinstance(v, int) and not isinstance(v, bool) and \
                    -2**31 <= v < 2**31:
                return struct.pack("<Ii", gguf_writer._I32, v)
            return value(v)
        gguf_writer._value = old_value
        try:
            old = self.write("old.gguf")
        finally:
            gguf_writer._value = value
        self.assertNotEqual(open(old, "rb").read(), open(new, "rb").read())
        changed = gguf_retag.retag(old)
        self.assertEqual(sorted(changed), ["general.alignment",
                                           "llama.context_length"])
        self.assertEqual(open(old, "rb").read(), open(new, "rb").read())
        self.assertEqual(gguf_retag.retag(old), [])  # idempotent

    def test_committed_models_need_no_retag(self):
        for name in ("kjv-llama.gguf", "needle-llama.gguf"):
            src = os.path.join(REPO, "models", name)
            self.assertTrue(os.path.exists(src), src)
            copy = os.path.join(self.dir, name)
            shutil.copy(src, copy)
            self.assertEqual(gguf_retag.retag(copy), [], name)

    def test_engine_reads_a_written_model(self):
        # The demo model is gguf_writer's output: the engine's info on it.
        out = subprocess.run(
            [MODEL_TOOL, "info", os.path.join(REPO, "models",
                                              "kjv-llama.gguf")],
            capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("llama", out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
