"""Needle-in-a-haystack sequences for the retrieval model (train_needle.py)
and its evaluation (eval_needle.py): key-value sentences scattered through
KJV filler, then a question whose answer the model must copy.

The prompt format (docs/clusterkv.md, "Needle prompts"):
  filler   any text; sentences of the KJV here
  needle   " The magic number for KEY is VALUE."   (KEY a word, VALUE 7
           digits, all different, the first not 0)
  variable " VAR NAME = VALUE."  or  " VAR NAME = OTHER."
  single / multi-key (one key asked, other needles are distractors):
    "\\n\\nQuestion: What is the magic number for KEY?\\n"
    "Answer: The magic number for KEY is"            -> " VALUE."
  multi-query (several keys asked):
    "\\n\\nQuestion: What are the magic numbers for K1, K2 and K3?\\n"
    "Answer: The magic number for K1 is"
                     -> " V1. The magic number for K2 is V2. ... is V3."
  multi-value (one key, several needles, in document order):
    "\\n\\nQuestion: What are all the magic numbers for KEY?\\n"
    "Answer: The magic numbers for KEY are"          -> " V1, V2 and V3."
  variable tracking (a chain VAR A = 12345. VAR B = A. VAR C = B.):
    "\\n\\nQuestion: Which variables are assigned the value VALUE?\\n"
    "Answer: The variables are"                      -> " A, B and C."
The answer is the generated text up to and including the first "." (the
model then emits <|eos|>); it is correct when it equals the expected text.

Sequences are built in token space from pre-tokenized pieces that start
with a space, inserted at sentence ends of the filler, so the engine's
tokenization of the decoded text gives the same ids.
"""
import re
import zlib

import numpy as np

NEEDLE = " The magic number for {k} is {v}."
VAR_VALUE = " VAR {a} = {v}."
VAR_COPY = " VAR {a} = {b}."
Q_SINGLE = ("\n\nQuestion: What is the magic number for {k}?\n"
            "Answer: The magic number for {k} is")
Q_MULTI = ("\n\nQuestion: What are the magic numbers for {ks}?\n"
           "Answer: The magic number for {k} is")
Q_VALUES = ("\n\nQuestion: What are all the magic numbers for {k}?\n"
            "Answer: The magic numbers for {k} are")
Q_VARS = ("\n\nQuestion: Which variables are assigned the value {v}?\n"
          "Answer: The variables are")
VALUE_DIGITS = 7
TASKS = ("single", "multikey", "multiquery", "multivalue", "vt")


def held_out(item, parts=4):
    """Whether an item (word, number, name) belongs to the held-out quarter,
    by a stable hash: evaluation uses only held-out keys and values."""
    return zlib.crc32(str(item).encode()) % parts == 0


def key_words(text):
    """Candidate keys: lower-case words of 4-9 letters in the text."""
    return sorted(set(re.findall(r"\b[a-z]{4,9}\b", text)))


def join_and(items):
    items = list(items)
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


class Haystack:
    """Builds sequences from filler ids; `heldout` selects the evaluation
    halves of the key, value and variable-name vocabularies."""

    def __init__(self, tok, filler_ids, words, heldout, rng,
                 copy_vocab=None):
        self.tok, self.rng = tok, rng
        # Token ids the `copy` task draws from (all but the specials by
        # default; a small subset forms the induction head sooner).
        self.copy_vocab = np.arange(len(tok.tokens) - 2) \
            if copy_vocab is None else np.asarray(copy_vocab)
        self.filler = np.asarray(filler_ids, dtype=np.int64)
        self.keys = [w for w in words if held_out(w) == heldout]
        self.heldout = heldout
        strings = tok.tokens
        ends = np.array([s.endswith((".", ";", ":")) for s in strings])
        space = np.array([s.startswith("\u0120") for s in strings])
        # boundary[i]: a piece may be inserted before filler token i.
        self.boundary = np.zeros(len(self.filler), dtype=bool)
        self.boundary[1:] = ends[self.filler[:-1]] & space[self.filler[1:]]
        self.word = np.zeros(len(self.filler), dtype=bool)  # word starts
        self.word[1:] = space[self.filler[1:]]
        self.eos = tok.special_ids["<|eos|>"]

    def enc(self, s):
        return self.tok.encode(s)

    def value(self):
        """A 7-digit number whose digits are all different (first digit not
        0): every digit occurs once in a value, so the copy of the next
        digit is found by matching the digit just written."""
        while True:
            d = self.rng.permutation(10)[:VALUE_DIGITS]
            if d[0] == 0:
                continue
            v = "".join(str(int(x)) for x in d)
            if held_out(v) == self.heldout:
                return v

    def var_name(self):
        while True:
            n = "".join(chr(65 + int(c)) for c in self.rng.integers(0, 26, 5))
            if held_out(n) == self.heldout:
                return n

    def distinct_keys(self, n):
        idx = self.rng.choice(len(self.keys), size=n, replace=False)
        return [self.keys[i] for i in idx]

    def needles(self, task, n_distract, n_ask=1):
        """Returns (needle strings in document order, [(question, answer)]);
        single and multikey ask n_ask of their keys, one after the other."""
        r = self.rng
        if task in ("single", "multikey"):
            n = 1 + (n_distract if task == "multikey" else 0)
            keys = self.distinct_keys(n)
            vals = [self.value() for _ in keys]
            pairs = list(zip(keys, vals))
            r.shuffle(pairs)
            return ([NEEDLE.format(k=a, v=b) for a, b in pairs],
                    [(Q_SINGLE.format(k=k), f" {v}.")
                     for k, v in list(zip(keys, vals))[:n_ask]])
        if task == "multiquery":
            n_ask = int(r.integers(2, 5))
            keys = self.distinct_keys(n_ask + n_distract)
            vals = [self.value() for _ in keys]
            pairs = list(zip(keys, vals))
            r.shuffle(pairs)
            ask = list(zip(keys[:n_ask], vals[:n_ask]))
            ans = f" {ask[0][1]}." + "".join(
                NEEDLE.format(k=a, v=b) for a, b in ask[1:])
            return ([NEEDLE.format(k=a, v=b) for a, b in pairs],
                    [(Q_MULTI.format(ks=join_and(a for a, _ in ask),
                                     k=ask[0][0]), ans)])
        if task == "multivalue":
            n_val = int(r.integers(2, 5))
            keys = self.distinct_keys(1 + n_distract)
            items = [(keys[0], self.value()) for _ in range(n_val)]
            items += [(a, self.value()) for a in keys[1:]]
            r.shuffle(items)
            vals = [b for a, b in items if a == keys[0]]
            return ([NEEDLE.format(k=a, v=b) for a, b in items],
                    [(Q_VALUES.format(k=keys[0]), " " + join_and(vals) + ".")])
        if task == "vt":
            chains = []
            for _ in range(1 + min(n_distract, 2)):
                names = [self.var_name() for _ in range(int(r.integers(2, 5)))]
                chains.append((names, self.value()))
            # Each chain's statements stay in order; chains interleave.
            order = sum(([c] * len(chains[c][0]) for c in range(len(chains))),
                        [])
            r.shuffle(order)
            pos = [0] * len(chains)
            out = []
            for c in order:
                names, v = chains[c]
                i = pos[c]
                out.append(VAR_VALUE.format(a=names[0], v=v) if i == 0 else
                           VAR_COPY.format(a=names[i], b=names[i - 1]))
                pos[c] += 1
            names, v = chains[0]
            return out, [(Q_VARS.format(v=v), " " + join_and(names) + ".")]
        raise ValueError(task)

    def build(self, task, length, n_distract=0, depths=None, n_ask=1):
        """One sequence of exactly `length` ids (BOS first; no EOS when the
        answer ends the sequence). Returns (ids, weights, cuts, answer_start):
        weights[i] is 1 for answer ids (incl. EOS), 0 for the question, and
        -1 for filler; cuts are indices where a new chunk starts (needles,
        the question) for skip-wise positions. `depths` (fractions of the
        filler, one per needle, or one for a task of several pieces: the
        asked needle's, see anchored) fix where needles go. With n_ask > 1 the
        questions follow one another (each answer ends with EOS); the
        returned answer_start and answer are the first question's."""
        if task == "repeat":
            return self.repeat(length)
        if task == "copy":
            return self.copy(length)
        needles, qa = self.needles(task, n_distract, n_ask)
        pieces = [self.enc(s) for s in needles]
        qa_ids = [(self.enc(q), self.enc(a) + [self.eos]) for q, a in qa]
        n_fill = (length - 1 - sum(map(len, pieces)) -
                  sum(len(q) + len(a) for q, a in qa_ids))
        if n_fill < 16:
            raise ValueError("sequence too short for its needles")
        start = int(self.rng.integers(0, len(self.filler) - n_fill))
        fill = self.filler[start:start + n_fill]
        spots = np.flatnonzero(self.boundary[start:start + n_fill])
        if len(spots) < len(pieces):
            spots = np.flatnonzero(self.word[start:start + n_fill])
        if depths is not None and len(depths) == 1 and len(pieces) > 1:
            needles, pieces, where = self.anchored(task, needles, pieces, qa,
                                                   spots, n_fill, depths[0])
        elif depths is None:
            where = np.sort(self.rng.choice(spots, size=len(pieces),
                                            replace=False))
        else:
            where = np.array([spots[np.argmin(np.abs(spots - d * n_fill))]
                              for d in depths])
            if len(pieces) == 1 and depths[0] <= 0.0:
                where = np.array([0])  # depth 0: right after BOS
            if len(pieces) == 1 and depths[0] >= 1.0:
                where = np.array([n_fill])  # depth 100 %: before the question
        ids, weights, cuts, prev = [self.tok.special_ids["<|bos|>"]], [0], [], 0
        ends = []  # index after each needle's last token
        for w, p in zip(where, pieces):
            ids += fill[prev:w].tolist()
            weights += [-1] * (w - prev)
            cuts.append(len(ids))
            ids += p
            ends.append(len(ids))
            weights += [0] * len(p)
            prev = w
        ids += fill[prev:].tolist()
        weights += [-1] * (n_fill - prev)
        answer_start = None
        # src: (answer index, index of the needle token it copies, 1 for an
        # answer's first token else 0) for the single-answer tasks: the
        # answer " VALUE." is the needle's tail.
        self.last_src = []
        for (q_ids, a_ids), (_, a_text) in zip(qa_ids, qa):
            cuts.append(len(ids))
            ids += q_ids
            weights += [0] * len(q_ids)
            answer_start = answer_start or len(ids)
            if task in ("single", "multikey"):
                i = next(i for i, n in enumerate(needles)
                         if n.endswith(" is" + a_text))
                tail = len(a_ids) - 1  # without EOS
                if pieces[i][-tail:] == a_ids[:tail]:
                    self.last_src += [(len(ids) + j, ends[i] - tail + j,
                                       int(j == 0)) for j in range(tail)]
            ids += a_ids
            weights += [1] * len(a_ids)
        return ids[:length], weights[:length], cuts, answer_start, qa[0][1]


    def anchored(self, task, needles, pieces, qa, spots, n_fill, depth):
        """Places a multi-piece task by one depth: the asked needle (the
        first asked one for multiquery) goes to the sentence end nearest
        `depth` and the other needles to random ones, the pieces then in
        position order (their order means nothing to these answers); for
        multivalue and vt, whose answers follow document order, the first
        statement goes there and the others, in order, after it (or the
        last ones of the filler when too few are left)."""
        n = len(pieces)
        at = spots[np.argmin(np.abs(spots - depth * n_fill))]
        if task in ("single", "multikey", "multiquery"):
            value = qa[0][1].split(".")[0] + "."
            a = next(i for i, s in enumerate(needles)
                     if s.endswith(" is" + value))
            rest = self.rng.choice(spots[spots != at], size=n - 1,
                                   replace=False)
            where = np.concatenate([[at], rest])
            others = [i for i in range(n) if i != a]
            order = np.argsort(where, kind="stable")
            idx = np.array([a] + others)[order]
            return ([needles[i] for i in idx], [pieces[i] for i in idx],
                    where[order])
        after = spots[spots > at]
        if len(after) < n - 1:
            where = spots[-n:]
        else:
            where = np.concatenate(
                [[at], np.sort(self.rng.choice(after, size=n - 1,
                                               replace=False))])
        return needles, pieces, where

    def repeat(self, length):
        """Training only: a filler span seen once, then repeated at the end
        (loss on the repeat): the plain copy that retrieval is built on."""
        n = int(self.rng.integers(16, 65))
        n_fill = length - 1 - 2 * n
        start = int(self.rng.integers(0, len(self.filler) - n_fill - n))
        seg = self.filler[start:start + n].tolist()
        fill = self.filler[start + n:start + n + n_fill].tolist()
        at = int(self.rng.integers(0, n_fill + 1))
        ids = [self.tok.special_ids["<|bos|>"]] + fill[:at] + seg + fill[at:]
        cuts = [1 + at, len(ids)]
        weights = [0] + [-1] * at + [0] * n + [-1] * (n_fill - at)
        self.last_src = [(cuts[1] + j, cuts[0] + j, 0) for j in range(1, n)]
        ids += seg
        weights += [0] + [1] * (n - 1)
        return ids, weights, cuts, cuts[1], ""

    def copy(self, length):
        """Training only: random tokens with a span of them (16 to 48, or
        to min(96, length / 2 - 8) where that is more: a denser copy loss)
        seen twice, at a random distance (loss on the repeat). A fixed
        distance is learnt as a positional shortcut that breaks at other
        lengths."""
        r = self.rng
        n = int(r.integers(16, max(49, min(97, length // 2 - 8))))
        a, b = sorted(r.integers(0, length - 2 * n, size=2).tolist())
        toks = self.copy_vocab[r.integers(0, len(self.copy_vocab),
                                          length)].tolist()
        seg = toks[:n]
        ids = ([self.tok.special_ids["<|bos|>"]] + toks[n:n + a] + seg +
               toks[n + a:n + b] + seg)
        weights = [0] * (1 + a + n + (b - a)) + [0] + [1] * (n - 1)
        first, second = 1 + a, 1 + b + n  # the span's two starts
        self.last_src = [(second + j, first + j, 0) for j in range(1, n)]
        rest = length - len(ids)
        ids += toks[n + b:n + b + rest]
        weights += [-1] * rest
        return ids[:length], weights[:length], [1 + a, 1 + b + n], 1 + b + n, ""


def skip_positions(length, cuts, rng, span=32768, p_skip=0.85, alpha=1.0,
                   power=1.0):
    """Positions 0..length-1 plus skips at chunk starts (PoSE-style): local
    order and distances stay those of the engine (gap 1 within a chunk),
    while distances between chunks reach up to `span`; with probability
    1 - p_skip the positions are contiguous. The skips sum to
    (span - length) * u ** power (u uniform; power < 1 favours long spans)
    and are shared out by a Dirichlet(alpha) draw (alpha < 1: mostly one
    big skip, so chunk distances near `span` are seen as often as short
    ones)."""
    pos = np.arange(length, dtype=np.int64)
    if rng.random() >= p_skip or span <= length:
        return pos
    total = int((span - length) * rng.random() ** power)
    extra = [int(c) for c in rng.integers(1, length, size=2)]
    at = np.array(sorted(set([c for c in cuts if 0 < c < length] + extra)))
    share = rng.dirichlet(np.full(len(at), alpha)) * total
    for a, s in zip(at, np.floor(share).astype(np.int64)):
        pos[a:] += s
    return pos


def decode(tok, ids):
    """Text of ids (the inverse of the byte-to-unicode table)."""
    u2b = {u: b for b, u in tok.b2u.items()}
    special = set(tok.special_ids.values())
    out = bytearray()
    for i in ids:
        if i in special:
            continue
        out += bytes(u2b[ch] for ch in tok.tokens[i])
    return out.decode("utf-8", errors="replace")
