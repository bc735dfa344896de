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
# Task mixture of the later phases: single needles and distractor needles
# first; the other tasks only so that their formats are seen.
MIX = {"copy": 0.2, "repeat": 0.05, "single": 0.3, "multikey": 0.35,
       "multiquery": 0.04, "multivalue": 0.03, "vt": 0.03}
# Phases, run in order; each ends when its time share of --max-minutes is
# spent or earlier when the running teacher-forced exact rate of every task
# in `advance` reaches its threshold (the induction head is measured, not
# assumed). (name, time share, sequence length, batch, task mixture, share
# of sequences with skip-wise positions, filler mixture, advance).
# The copy tasks stay in every phase (run 4-8 collapsed at a hard switch).
PHASES = [
    ("induction", 0.30, 192, 16,
     {"copy": 0.4, "repeat": 0.2, "single": 0.1, "multikey": 0.3}, 0.5,
     {"kjv": 1.0}, {"copy": 0.8, "multikey": 0.5}),
    ("needles", 0.25, 384, 12,
     {"copy": 0.3, "repeat": 0.05, "single": 0.25, "multikey": 0.4}, 0.85,
     {"random": 0.3, "kjv": 0.7}, {"multikey": 0.9, "single": 0.95}),
    ("long", 0.25, 1024, 4, MIX, 0.85, {"random": 0.1, "kjv": 0.9}, {}),
    ("longer", 0.20, 2048, 2, MIX, 0.85, {"random": 0.1, "kjv": 0.9}, {}),
]
WARMUP = 100  # steps, at the start
PHASE_WARMUP = 30  # steps, at every later phase
DECAY = 0.15  # the last share of the time box decays the rate to 10 %
DISTRACT = (1, 6)
ASK = 6  # multikey sequences ask up to this many of their keys in turn
LM_WEIGHT = 0.5  # next-token loss on filler, relative to the answer loss
# (KJV text: predicting it forms the previous-token heads an induction
# head needs; with a weak LM signal no copy formed in 1000 steps)
FILLER_SAMPLE = 0.3  # the share of filler positions that carry it
HELDOUT_EVERY = 600.0  # seconds between held-out checks during training


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--max-minutes", type=float, default=88.0)
    p.add_argument("--seed", type=int, default=4321)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-3)
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
    (logits only where a loss is taken: the output matrix is costly).
    Returns (loss, answer loss, filler loss, exact per sequence, answer
    loss per sequence)."""
    h = model.hidden(x, pos)
    ans = w > 0
    fill = (w < 0) & torch.from_numpy(rng.random(w.shape) < FILLER_SAMPLE)
    a_logits = model.out(h[ans])
    a_tok = F.cross_entropy(a_logits, y[ans], reduction="none")
    a_loss = a_tok.mean()
    f_loss = F.cross_entropy(model.out(h[fill]), y[fill]) if fill.any() \
        else torch.zeros(())
    # Teacher-forced exact answers: every answer token is the argmax.
    wrong = torch.zeros(w.shape)
    wrong[ans] = (a_logits.argmax(-1) != y[ans]).float()
    per_seq = torch.zeros(w.shape)
    per_seq[ans] = a_tok.detach()
    per_seq = per_seq.sum(1) / ans.sum(1).clamp(min=1)
    return a_loss + LM_WEIGHT * f_loss, a_loss, f_loss, wrong.sum(1) == 0, \
        per_seq


def lr_factor(step, in_phase, frac):
    warm = min(1.0, (step + 1) / WARMUP, (in_phase + 1) / PHASE_WARMUP)
    if frac > 1.0 - DECAY:
        warm *= max(0.1, 1.0 - 0.9 * (frac - 1.0 + DECAY) / DECAY)
    return warm


def train(model, hay, held, args, log_path):
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr,
                            betas=(0.9, 0.95), weight_decay=args.wd)
    rng = np.random.default_rng(args.seed)
    t0, log, held_log, phase_log = time.time(), [], [], []
    box = args.max_minutes * 60
    exact = collections.defaultdict(lambda: collections.deque(maxlen=100))
    losses = collections.defaultdict(lambda: collections.deque(maxlen=100))
    phase, phase_step0, edge = 0, 0, PHASES[0][1] * box
    next_held = HELDOUT_EVERY
    step = 0
    for step in range(args.steps):
        elapsed = time.time() - t0
        name, _, seq, batch, mix, p_skip, filler, advance = PHASES[phase]
        ready = advance and all(
            len(exact[k]) >= 50 and sum(exact[k]) / len(exact[k]) >= v
            for k, v in advance.items())
        if phase + 1 < len(PHASES) and (elapsed > edge or ready):
            phase_log.append({"phase": name, "end_step": step,
                              "end_seconds": round(elapsed, 1),
                              "advanced_by": "accuracy" if ready else "time"})
            print(json.dumps(phase_log[-1]), flush=True)
            phase += 1
            phase_step0 = step
            # Time left over from an early advance goes to the later phases.
            rest = sum(p[1] for p in PHASES[phase:])
            edge = elapsed + (box - elapsed) * PHASES[phase][1] / rest
            exact.clear()
            losses.clear()
            name, _, seq, batch, mix, p_skip, filler, advance = PHASES[phase]
        x, y, w, pos, names = batch_of(hay, rng, seq, batch, mix, p_skip,
                                       filler)
        for g in opt.param_groups:
            g["lr"] = args.lr * lr_factor(step, step - phase_step0,
                                          elapsed / box)
        loss, a_loss, f_loss, ok, per_seq = loss_of(model, x, y, w, pos, rng)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        for task, good, l in zip(names, ok.tolist(), per_seq.tolist()):
            exact[task].append(good)
            losses[task].append(l)
        if step % 10 == 0:
            acc = {k: round(sum(v) / len(v), 3) for k, v in exact.items()}
            tl = {k: round(sum(v) / len(v), 3) for k, v in losses.items()}
            log.append({"step": step, "phase": name, "seq": seq,
                        "lr": round(opt.param_groups[0]["lr"], 6),
                        "answer_loss": round(a_loss.item(), 4),
                        "filler_loss": round(f_loss.item(), 4),
                        "answer_loss_by_task": tl, "exact": acc,
                        "seconds": round(elapsed, 1)})
            print(json.dumps(log[-1]), flush=True)
            with open(log_path, "a") as f:
                f.write(json.dumps(log[-1]) + "\n")
        if elapsed > next_held:
            next_held = elapsed + HELDOUT_EVERY
            ex = heldout_exact(model, held, np.random.default_rng(8),
                               seqs=(512, 2048), per_task=8,
                               tasks=("single", "multikey"))
            held_log.append({"step": step, "seconds": round(elapsed, 1),
                             "heldout_exact": ex})
            print(json.dumps(held_log[-1]), flush=True)
            with open(log_path, "a") as f:
                f.write(json.dumps(held_log[-1]) + "\n")
            torch.save(model.state_dict(), args.state_path)
        if elapsed > box:
            print(f"time box reached at step {step}", flush=True)
            break
    return log, held_log, phase_log, time.time() - t0, step + 1


def heldout_exact(model, hay, rng, seqs=(2048,), per_task=40,
                  tasks=needle.TASKS):
    """Exact answers (teacher-forced) on held-out filler, keys and values at
    contiguous positions 0..seq-1 (as the engine uses them), in PyTorch;
    {f"{task}@{seq}": rate}."""
    model.eval()
    out = {}
    with torch.no_grad():
        for seq in seqs:
            per = max(1, min(4, 8192 // seq))
            for task in tasks:
                good, n = 0, 0
                while n < per_task:
                    xs = [hay.build(task, seq + 1, 3) for _ in range(per)]
                    ids = torch.tensor([s[0] for s in xs])
                    w = torch.tensor([s[1] for s in xs],
                                     dtype=torch.float32)[:, 1:]
                    ok = loss_of(model, ids[:, :-1], ids[:, 1:], w,
                                 torch.arange(seq), rng)[3]
                    good += int(ok.sum())
                    n += per
                out[f"{task}@{seq}"] = round(good / n, 3)
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
    held = needle.Haystack(tok, tok.encode(heldout), words, True,
                           np.random.default_rng(7))
    log, held_log, phase_log, seconds, steps = train(
        model, hay, held, args, stem + ".log.jsonl")
    torch.save(model.state_dict(), args.state_path)
    write_gguf(stem + ".gguf", model, c, tok, merges)
    exact = heldout_exact(model, held, np.random.default_rng(8),
                          seqs=(2048,), per_task=40)
    print(f"held-out exact (2k, teacher-forced): {exact}", flush=True)
    report = {
        "config": vars(c), "seed": args.seed, "steps": steps,
        "threads": args.threads, "phases": PHASES, "peak_lr": args.lr,
        "warmup": WARMUP, "phase_warmup": PHASE_WARMUP, "decay": DECAY,
        "weight_decay": args.wd, "ask": ASK, "distractors": DISTRACT,
        "lm_weight": LM_WEIGHT, "max_minutes": args.max_minutes,
        "phase_log": phase_log, "heldout_log": held_log,
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
