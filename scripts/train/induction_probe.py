#!/usr/bin/python3
"""Diagnostic for the retrieval model (issue 32): does a content-based copy
(induction head) form in the needle model's architecture, and after how
many steps? Random tokens from a small vocabulary with one span seen twice
at a random distance; the loss is on the repeat (ln V without copying).
RoPE positions jump at the two span starts (as train_needle.py's skip-wise
positions), so only a content match can find the first copy.

  /usr/bin/python3 scripts/train/induction_probe.py --minutes 20 \\
      [--vocab 256] [--dim 128 --heads 2 --kv-heads 2] --out probe.jsonl \\
      [--state probe.pt]
"""
import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from model import Config, Llama


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--minutes", type=float, default=20.0)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=384)
    p.add_argument("--rope-base", type=float, default=500000.0)
    p.add_argument("--span", type=int, default=32768)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True)
    p.add_argument("--state", default="",
                   help="save the PyTorch state here at the end (with "
                        "--vocab 2048, a train_needle.py --init)")
    return p.parse_args()


def batch(rng, a):
    """(ids, targets, mask, positions): BOS, random tokens, a span of
    a.seq/4..a.seq/2 tokens repeated at a random distance."""
    xs, ms, ps = [], [], []
    for _ in range(a.batch):
        n = int(rng.integers(a.seq // 4, a.seq // 2))
        gap = int(rng.integers(0, a.seq - 2 * n))
        lead = int(rng.integers(0, a.seq - 2 * n - gap + 1))
        toks = rng.integers(0, a.vocab, a.seq + 1)
        seg = toks[:n]
        body = np.concatenate([toks[n:n + lead], seg, toks[n + lead:
                               n + lead + gap], seg])
        body = np.concatenate([body, toks[n + lead + gap:
                                          a.seq + 1 - n]])
        mask = np.zeros(a.seq + 1, dtype=bool)
        s2 = lead + n + gap  # index of the repeat's first token
        mask[s2:s2 + n - 1] = True  # targets: repeat tokens 1..n-1
        pos = np.arange(a.seq + 1)
        jump = rng.integers(0, a.span - a.seq + 1, size=2)
        pos[lead:] += jump[0] // 2
        pos[s2:] += jump[1] // 2
        xs.append(body)
        ms.append(mask)
        ps.append(pos)
    ids = torch.tensor(np.stack(xs))
    # Input i predicts id i + 1: the mask of target i + 1 sits at input i.
    return (ids[:, :-1], ids[:, 1:], torch.tensor(np.stack(ms))[:, :-1],
            torch.tensor(np.stack(ps))[:, :-1])


def main():
    a = parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    rng = np.random.default_rng(a.seed)
    c = Config(vocab=a.vocab, dim=a.dim, layers=a.layers, heads=a.heads,
               kv_heads=a.kv_heads, ffn=a.ffn, rope_base=a.rope_base)
    model = Llama(c)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95),
                            weight_decay=0.0)
    t0, step = time.time(), 0
    with open(a.out, "w") as f:
        f.write(json.dumps({"config": vars(a), "ln_vocab":
                            round(math.log(a.vocab), 4)}) + "\n")
        while time.time() - t0 < a.minutes * 60:
            x, y, m, pos = batch(rng, a)
            for g in opt.param_groups:
                g["lr"] = a.lr * min(1.0, (step + 1) / 100)
            logits = model.out(model.hidden(x, pos)[m])
            loss = F.cross_entropy(logits, y[m])
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if step % 20 == 0:
                acc = (logits.argmax(-1) == y[m]).float().mean().item()
                rec = {"step": step, "seconds": round(time.time() - t0, 1),
                       "copy_loss": round(loss.item(), 4),
                       "token_acc": round(acc, 3)}
                f.write(json.dumps(rec) + "\n")
                f.flush()
                print(json.dumps(rec), flush=True)
            step += 1
    if a.state:
        torch.save(model.state_dict(), a.state)


if __name__ == "__main__":
    main()
