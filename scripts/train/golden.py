#!/usr/bin/python3
"""Reference logits of a GGUF written by train.py, computed by model.py in
float64 from exactly the stored weights (matrices as rounded to F16), for
the C++ engine's test (tests/model/trained_model_test.cc):

  /usr/bin/python3 scripts/train/golden.py MODEL.gguf HELDOUT.txt OUT.json

OUT.json: the prompt text, its token ids (the engine's tokenizer must give
the same), the positions and their logits.
"""
import json
import sys

import numpy as np
import torch

import bpe
import gguf_reader
from model import Config, Llama

PROMPT_BYTES = 1200  # a held-out passage of a few hundred tokens
POSITIONS = [0, 1, 63, 128, -1]


def load(path):
    meta, t = gguf_reader.read(path)
    p = "llama."
    c = Config(vocab=len(meta["tokenizer.ggml.tokens"]),
               dim=meta[p + "embedding_length"], layers=meta[p + "block_count"],
               heads=meta[p + "attention.head_count"],
               kv_heads=meta[p + "attention.head_count_kv"],
               ffn=meta[p + "feed_forward_length"],
               rope_base=meta[p + "rope.freq_base"],
               eps=meta[p + "attention.layer_norm_rms_epsilon"])
    m = Llama(c)
    names = {"embed.weight": "token_embd.weight",
             "norm.weight": "output_norm.weight", "out.weight": "output.weight"}
    parts = {"attn_norm": "attn_norm", "q": "attn_q", "k": "attn_k",
             "v": "attn_v", "o": "attn_output", "ffn_norm": "ffn_norm",
             "gate": "ffn_gate", "up": "ffn_up", "down": "ffn_down"}
    state = {}
    for key in m.state_dict():
        if key in names:
            src = names[key]
        else:
            _, i, part, _ = key.split(".")
            src = f"blk.{i}.{parts[part]}.weight"
        state[key] = torch.from_numpy(t[src].astype(np.float64))
    m = m.double()
    m.load_state_dict(state)
    return m, meta


def tokenizer(meta):
    return bpe.from_gguf_meta(meta)


def write_golden(model_path, heldout_path, out_path):
    model, meta = load(model_path)
    with open(heldout_path, encoding="utf-8") as f:
        text = f.read()[:PROMPT_BYTES]
    text = text[:text.rfind(" ")]  # end at a word boundary
    ids = [meta["tokenizer.ggml.bos_token_id"]] + tokenizer(meta).encode(text)
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0]
    positions = [p if p >= 0 else len(ids) + p for p in POSITIONS]
    with open(out_path, "w") as f:
        json.dump({"model": model_path.split("/")[-1], "prompt_text": text,
                   "prompt_ids": ids, "logit_positions": positions,
                   "logits": [logits[p].tolist() for p in positions]}, f)


if __name__ == "__main__":
    write_golden(*sys.argv[1:4])
