#!/usr/bin/python3
"""Trains the retrieval model (needle-llama): a small Llama-architecture
decoder taught to copy the value of a key from anywhere in a long KJV
document (needle.py has the prompt format), on the CPU with one thread.

  /usr/bin/python3 scripts/train/train_needle.py --out models/ [--steps N]

Length generalisation: it trains on 256-2048-token sequences whose RoPE
positions jump at chunk starts (needles, question) so that distances up to
32768 are seen with the engine's local spacing (skip-wise positions, PoSE),
with a large RoPE base. The tokenizer is the demo model's (kjv-llama.gguf).
Writes OUT/needle-llama.gguf, OUT/needle-llama.report.json and
OUT/needle-llama.pt (the PyTorch state, to resume or re-export).
"""
import argparse
import collections
import hashlib
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

import corpus
import golden
import gguf_reader
import gguf_writer
import needle
import train as kjv
from model import Config, Llama

CONTEXT = 32768
# Task mixture of the later phases.
MIX = {"copy": 0.15, "repeat": 0.05, "single": 0.25, "multikey": 0.30,
       "multiquery": 0.09, "multivalue": 0.08, "vt": 0.08}
# (fraction of steps, sequence length, batch, task mixture, share of
# sequences with skip-wise positions, filler mixture). Random-token copies
# first: the densest signal for induction heads (they form in ~150 steps).
# The needle tasks then come in beside a large share of copies, over
# random-token filler first (where copying what followed " is" is right
# for one of the needles), KJV filler gradually (switching at once, the
# fresh copy head was unlearnt in 20 steps), then longer documents at
# positions up to 32k. The learning rate warms up again at every phase.
PHASES = [(0.35, 128, 32, {"copy": 1.0}, 0.0, {"random": 1.0}),
          (0.20, 192, 24, {"copy": 0.5, "single": 0.2, "multikey": 0.3},
           0.0, {"random": 1.0}),
          (0.20, 384, 12, {"copy": 0.3, "repeat": 0.1, "single": 0.2,
                           "multikey": 0.4}, 0.5,
           {"random": 0.5, "kjv": 0.5}),
          (0.15, 1024, 4, MIX, 0.85, {"random": 0.2, "kjv": 0.8}),
          (0.10, 2048, 2, MIX, 0.85, {"random": 0.1, "kjv": 0.9})]
PHASE_WARMUP = 30
DISTRACT = (1, 6)
ASK = 6  # multikey sequences ask up to this many of their keys in turn
LM_WEIGHT = 0.1  # next-token loss on filler, relative to the answer loss
FILLER_SAMPLE = 0.1  # the share of filler positions that carry it


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=1600)
    p.add_argument("--max-minutes", type=float, default=88.0)
    p.add_argument("--seed", type=int, default=4321)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--wd", type=float, default=0.0)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=384)
    p.add_argument("--rope-base", type=float, default=500000.0)
    p.add_argument("--tokenizer", default="models/kjv-llama.gguf")
    p.add_argument("--init", default="", help="a .pt state to start from")
    p.add_argument("--export-only", action="store_true",
                   help="write OUT/needle-llama.gguf from --init and stop")
    return p.parse_args()


def phase_of(step, steps):
    """(seq, batch, mix, p_skip, filler, steps since the phase started)."""
    edge = 0.0
    for phase in PHASES:
        start = edge
        edge += phase[0]
        if step < edge * steps or phase is PHASES[-1]:
            return phase[1:] + (step - math.ceil(start * steps),)


def pick(rng, mix):
    names = list(mix)
    p = np.array([mix[n] for n in names])
    return names[rng.choice(len(names), p=p / p.sum())]


def batch_of(hays, rng, seq, batch, mix, p_skip, fillers):
    xs, ws, ps, names = [], [], [], []
    for _ in range(batch):
        task = pick(rng, mix)
        hay = hays[pick(rng, fillers)]
        n_d = int(rng.integers(DISTRACT[0], DISTRACT[1] + 1))
        while True:  # fewer needles (then a single needle) if they don't fit
            try:
                n_ask = int(rng.integers((n_d + 2) // 2, min(ASK, n_d + 1) + 1)) \
                    if task == "multikey" else 1
                ids, w, cuts, _, _ = hay.build(task, seq + 1, n_d,
                                               n_ask=n_ask)
                break
            except ValueError:
                task, n_d = (task, n_d - 1) if n_d > 0 else ("single", 0)
        xs.append(ids)
        ws.append(w)
        ps.append(needle.skip_positions(seq, cuts, rng, CONTEXT, p_skip))
        names.append(task)
    ids = torch.tensor(xs)
    w = torch.tensor(ws, dtype=torch.float32)[:, 1:]
    return ids[:, :-1], ids[:, 1:], w, torch.tensor(np.stack(ps)), names


def loss_of(model, x, y, w, pos, rng):
    """Answer loss + LM_WEIGHT * next-token loss on a sample of the filler
    (logits only where a loss is taken: the output matrix is costly)."""
    h = model.hidden(x, pos)
    ans = w > 0
    fill = (w < 0) & torch.from_numpy(rng.random(w.shape) < FILLER_SAMPLE)
    a_logits = model.out(h[ans])
    a_loss = F.cross_entropy(a_logits, y[ans])
    f_loss = F.cross_entropy(model.out(h[fill]), y[fill]) if fill.any() \
        else torch.zeros(())
    # Teacher-forced exact answers: every answer token is the argmax.
    wrong = torch.zeros(w.shape)
    wrong[ans] = (a_logits.argmax(-1) != y[ans]).float()
    return a_loss + LM_WEIGHT * f_loss, a_loss, f_loss, wrong.sum(1) == 0


def train(model, hay, args, log_path):
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr,
                            betas=(0.9, 0.95), weight_decay=args.wd)
    rng = np.random.default_rng(args.seed)
    t0, log = time.time(), []
    exact = collections.defaultdict(lambda: collections.deque(maxlen=200))
    step = 0
    for step in range(args.steps):
        seq, batch, mix, p_skip, filler, in_phase = phase_of(step,
                                                             args.steps)
        x, y, w, pos, names = batch_of(hay, rng, seq, batch, mix, p_skip,
                                       filler)
        for g in opt.param_groups:
            g["lr"] = kjv.lr_at(step, args.steps, args.lr) * min(
                1.0, (in_phase + 1) / PHASE_WARMUP)
        loss, a_loss, f_loss, ok = loss_of(model, x, y, w, pos, rng)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for name, good in zip(names, ok.tolist()):
            exact[name].append(good)
        elapsed = time.time() - t0
        if step % 10 == 0 or step == args.steps - 1:
            acc = {k: round(sum(v) / len(v), 3) for k, v in exact.items()}
            log.append({"step": step, "seq": seq, "answer_loss":
                        round(a_loss.item(), 4), "filler_loss":
                        round(f_loss.item(), 4), "exact": acc,
                        "seconds": round(elapsed, 1)})
            print(json.dumps(log[-1]), flush=True)
            with open(log_path, "a") as f:
                f.write(json.dumps(log[-1]) + "\n")
        if step % 100 == 99:
            torch.save(model.state_dict(), args.state_path)
        if elapsed > args.max_minutes * 60:
            print(f"time box reached at step {step}", flush=True)
            break
    return log, time.time() - t0, step + 1


def heldout_exact(model, hay, rng, seq=2048, per_task=40):
    """Exact answers (teacher-forced) on held-out filler, keys and values at
    contiguous positions 0..seq-1, in PyTorch."""
    model.eval()
    out = {}
    with torch.no_grad():
        for task in needle.TASKS:
            good = 0
            for _ in range(per_task // 4):
                xs = [hay.build(task, seq + 1, 3) for _ in range(4)]
                ids = torch.tensor([s[0] for s in xs])
                w = torch.tensor([s[1] for s in xs], dtype=torch.float32)[:, 1:]
                _, _, _, ok = loss_of(model, ids[:, :-1], ids[:, 1:], w,
                                      torch.arange(seq), rng)
                good += int(ok.sum())
            out[task] = good / per_task
    model.train()
    return out


def write_gguf(path, model, c, tok, merges):
    bos, eos = tok.special_ids[kjv.BOS], tok.special_ids[kjv.EOS]
    gguf_writer.write(path, kjv.metadata(
        c, tok, merges, bos, eos, name="needle-llama (clusterkv retrieval)",
        context_length=CONTEXT), model.gguf_tensors())


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    meta, _ = gguf_reader.read(args.tokenizer)
    tok = golden.tokenizer(meta)
    merges = [tuple(m.split(" ")) for m in meta["tokenizer.ggml.merges"]]
    train_text, heldout = corpus.load()
    t0 = time.time()
    fill = tok.encode(train_text)
    words = needle.key_words(train_text + heldout)
    print(f"filler {len(fill)} tokens ({time.time() - t0:.0f}s), "
          f"{len(words)} key words", flush=True)
    hay = {"kjv": needle.Haystack(tok, fill, words, False,
                                  np.random.default_rng(args.seed + 1)),
           "random": needle.Haystack(
               tok, np.random.default_rng(args.seed + 2).integers(
                   0, len(tok.tokens) - 2, 200_000), words, False,
               np.random.default_rng(args.seed + 3))}
    c = Config(vocab=len(tok.tokens), dim=args.dim, layers=args.layers,
               heads=args.heads, kv_heads=args.kv_heads, ffn=args.ffn,
               rope_base=args.rope_base)
    model = Llama(c)
    if args.init:
        model.load_state_dict(torch.load(args.init))
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "needle-llama")
    if args.export_only:
        write_gguf(stem + ".gguf", model, c, tok, merges)
        return
    args.state_path = stem + ".pt"
    if os.path.exists(stem + ".log.jsonl"):
        os.remove(stem + ".log.jsonl")
    log, seconds, steps = train(model, hay, args, stem + ".log.jsonl")
    torch.save(model.state_dict(), args.state_path)
    write_gguf(stem + ".gguf", model, c, tok, merges)
    held = needle.Haystack(tok, tok.encode(heldout), words, True,
                           np.random.default_rng(7))
    exact = heldout_exact(model, held, np.random.default_rng(8))
    print(f"held-out exact (2k, teacher-forced): {exact}", flush=True)
    report = {
        "config": vars(c), "seed": args.seed, "steps": steps,
        "threads": args.threads, "phases": PHASES, "peak_lr": args.lr,
        "phase_warmup": PHASE_WARMUP, "weight_decay": args.wd, "ask": ASK, "distractors": DISTRACT, "lm_weight": LM_WEIGHT,
        "positions": f"skip-wise (PoSE): gaps at chunk starts, span {CONTEXT}",
        "context_length": CONTEXT, "train_seconds": round(seconds, 1),
        "data": {"recipe": "needle.py sequences over KJV filler (corpus.py "
                           "train text); keys: KJV words of 4-9 letters, "
                           "values: 7-digit numbers, variables: 5 capitals; "
                           "a crc32 quarter of each vocabulary and the "
                           "corpus held-out text kept for evaluation",
                 "tokenizer": "kjv-llama.gguf merges",
                 "train_sha256": hashlib.sha256(
                     train_text.encode()).hexdigest(),
                 "filler_tokens": len(fill), "key_words": len(words)},
        "heldout_exact_2k_teacher_forced": exact,
        "torch": torch.__version__, "loss_log": log,
    }
    with open(stem + ".report.json", "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
