"""A byte-level BPE tokenizer in the GPT-2 convention (bytes mapped to
printable code points; merges as "a b" strings), trained on word counts.

The vocabulary is: 256 byte tokens, then one token per merge, then the
special tokens. Words are split like GPT-2's pre-tokenizer on ASCII text
(the inference side applies the real GPT-2 regex; any merge list is a valid
BPE model, so the split only affects which merges are learned).
"""
import collections
import re

_SPLIT = re.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def byte_to_unicode():
    keep = (list(range(ord("!"), ord("~") + 1)) +
            list(range(ord("¡"), ord("¬") + 1)) +
            list(range(ord("®"), ord("ÿ") + 1)))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def train(text, n_merges):
    """Returns the merge list [(a, b), ...] in rank order."""
    b2u = byte_to_unicode()
    counts = collections.Counter(_SPLIT.findall(text))
    words = [[b2u[b] for b in w.encode("utf-8")] for w in counts]
    freq = list(counts.values())
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pairs[(a, b)] += freq[i]
            where[(a, b)].add(i)
    merges = []
    for _ in range(n_merges):
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pairs[best] < 2:
            break
        merges.append(best)
        joined = best[0] + best[1]
        for i in list(where[best]):
            w = words[i]
            for a, b in zip(w, w[1:]):  # remove this word's pairs
                pairs[(a, b)] -= freq[i]
                if pairs[(a, b)] <= 0:
                    del pairs[(a, b)]
                where[(a, b)].discard(i)
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and (w[j], w[j + 1]) == best:
                    out.append(joined)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for a, b in zip(out, out[1:]):
                pairs[(a, b)] += freq[i]
                where[(a, b)].add(i)
    return merges


class Tokenizer:
    """Encodes text with a merge list (rank order), for training data."""

    def __init__(self, merges, specials):
        self.b2u = byte_to_unicode()
        self.tokens = [self.b2u[b] for b in range(256)]
        self.tokens += [a + b for a, b in merges]
        self.special_ids = {}
        for s in specials:
            self.special_ids[s] = len(self.tokens)
            self.tokens.append(s)
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.ranks = {m: r for r, m in enumerate(merges)}
        self.merges = merges
        self.cache = {}

    def _word(self, w):
        if w in self.cache:
            return self.cache[w]
        parts = [self.b2u[b] for b in w.encode("utf-8")]
        while len(parts) > 1:
            ranked = [(self.ranks.get((a, b), 1 << 30), k)
                      for k, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, k = min(ranked)
            if rank == 1 << 30:
                break
            parts[k:k + 2] = [parts[k] + parts[k + 1]]
        ids = [self.ids[p] for p in parts]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for w in _SPLIT.findall(text):
            out.extend(self._word(w))
        return out


def from_gguf_meta(meta):
    """The tokenizer of a GGUF file's metadata (merges and the control
    tokens, token_type 3)."""
    merges = [tuple(x.split(" ")) for x in meta["tokenizer.ggml.merges"]]
    specials = [s for s, kind in zip(meta["tokenizer.ggml.tokens"],
                                     meta["tokenizer.ggml.token_type"])
                if kind == 3]
    return Tokenizer(merges, specials)
