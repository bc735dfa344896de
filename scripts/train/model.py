"""A Llama-architecture decoder in PyTorch with exactly the conventions of
the engine's `llama` forward pass: RMSNorm, RoPE on adjacent channel pairs
(2i, 2i+1), grouped-query attention (query head h uses KV head
h // (heads / kv_heads)), SwiGLU MLP, untied output matrix."""
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


class Config:
    def __init__(self, vocab, dim=256, layers=4, heads=8, kv_heads=2,
                 ffn=768, rope_base=100000.0, eps=1e-5):
        self.vocab, self.dim, self.layers = vocab, dim, layers
        self.heads, self.kv_heads, self.ffn = heads, kv_heads, ffn
        self.head_dim = dim // heads
        self.rope_base, self.eps = rope_base, eps


class RmsNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * \
            self.weight


def rope(x, positions, base):
    """x: (batch, heads, seq, head_dim); rotates pairs (2i, 2i+1).
    positions: (seq,), or (batch, seq) for one position list per sequence."""
    d = x.shape[-1]
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = (positions.double()[..., None] * inv).float()
    if ang.dim() == 3:  # (batch, seq, d/2) -> (batch, 1, seq, d/2)
        ang = ang[:, None]
    cos, sin = ang.cos(), ang.sin()
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.flatten(-2)


def causal_attention_block(q, k, v, first):
    """Causal attention of queries at positions first.. over keys 0..;
    q: (b, h, tq, d), k/v: (b, h, first + tq, d)."""
    tq, tk = q.shape[2], k.shape[2]
    scores = (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-1, -2)
    mask = torch.ones(tq, tk, dtype=torch.bool).triu(first + 1)
    return scores.masked_fill(mask, float("-inf")).softmax(-1) @ v


# Above this many tokens attention runs in query blocks that are recomputed
# in the backward pass, so an 8192-token sequence needs no 8192^2 score
# matrices kept for autograd (memory, not arithmetic, is the limit).
DIRECT_ATTENTION_MAX = 2048
QUERY_BLOCK = 1024


def causal_attention(q, k, v):
    t = q.shape[2]
    if t <= DIRECT_ATTENTION_MAX or not torch.is_grad_enabled():
        return causal_attention_block(q, k, v, 0)
    out = []
    for first in range(0, t, QUERY_BLOCK):
        last = min(t, first + QUERY_BLOCK)
        out.append(checkpoint(causal_attention_block, q[:, :, first:last],
                              k[:, :, :last], v[:, :, :last], first,
                              use_reentrant=False))
    return torch.cat(out, dim=2)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        hd = c.head_dim
        self.attn_norm = RmsNorm(c.dim, c.eps)
        self.q = nn.Linear(c.dim, c.heads * hd, bias=False)
        self.k = nn.Linear(c.dim, c.kv_heads * hd, bias=False)
        self.v = nn.Linear(c.dim, c.kv_heads * hd, bias=False)
        self.o = nn.Linear(c.heads * hd, c.dim, bias=False)
        self.ffn_norm = RmsNorm(c.dim, c.eps)
        self.gate = nn.Linear(c.dim, c.ffn, bias=False)
        self.up = nn.Linear(c.dim, c.ffn, bias=False)
        self.down = nn.Linear(c.ffn, c.dim, bias=False)
        self.keep_qk, self.qk = False, None

    def forward(self, x, positions):
        c = self.c
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(b, t, c.heads, c.head_dim).transpose(1, 2)
        k = self.k(h).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.v(h).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        q, k = rope(q, positions, c.rope_base), rope(k, positions, c.rope_base)
        if self.keep_qk:  # for attention supervision (train_needle.py)
            self.qk = (q, k)
        group = c.heads // c.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        a = causal_attention(q, k, v)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        h = self.ffn_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab, c.dim)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RmsNorm(c.dim, c.eps)
        self.out = nn.Linear(c.dim, c.vocab, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)
        for blk in self.blocks:  # scaled residual projections
            nn.init.normal_(blk.o.weight, std=0.02 / math.sqrt(2 * c.layers))
            nn.init.normal_(blk.down.weight,
                            std=0.02 / math.sqrt(2 * c.layers))

    def hidden(self, ids, positions=None):
        """The final normed states; positions: RoPE positions, (seq,) or
        (batch, seq); by default 0..seq-1 as the engine uses them."""
        if positions is None:
            positions = torch.arange(ids.shape[1])
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x, positions)
        return self.norm(x)

    def forward(self, ids, positions=None):
        return self.out(self.hidden(ids, positions))

    def gguf_tensors(self):
        """(name, array) pairs named as llama.cpp names llama tensors;
        matrices in F16, norms in F32."""
        f16 = lambda t: t.detach().numpy().astype("float16")
        f32 = lambda t: t.detach().numpy().astype("float32")
        out = [("token_embd.weight", f16(self.embed.weight))]
        for i, b in enumerate(self.blocks):
            p = f"blk.{i}."
            out += [(p + "attn_norm.weight", f32(b.attn_norm.weight)),
                    (p + "attn_q.weight", f16(b.q.weight)),
                    (p + "attn_k.weight", f16(b.k.weight)),
                    (p + "attn_v.weight", f16(b.v.weight)),
                    (p + "attn_output.weight", f16(b.o.weight)),
                    (p + "ffn_norm.weight", f32(b.ffn_norm.weight)),
                    (p + "ffn_gate.weight", f16(b.gate.weight)),
                    (p + "ffn_up.weight", f16(b.up.weight)),
                    (p + "ffn_down.weight", f16(b.down.weight))]
        out += [("output_norm.weight", f32(self.norm.weight)),
                ("output.weight", f16(self.out.weight))]
        return out


def attention_log_prob(block, b, t, s, head, boost=0.0):
    """log of the attention weight that query head `head` of `block` gives
    from query index t to key index s in sequence b (index tensors of one
    length), from the q, k its last forward pass kept (keep_qk). With
    `boost` = ln K every other key counts K times, as if the context were K
    times longer with keys like these: the weight the head would keep on s
    among K times more distractors."""
    q, k = block.qk
    kv = head // (q.shape[1] // k.shape[1])
    qs = q[b, head, t]  # (n, d)
    ks = k[b, kv]  # (n, T, d)
    scores = (ks @ qs[:, :, None])[:, :, 0] / math.sqrt(q.shape[-1])
    later = torch.arange(k.shape[2])[None, :] > t[:, None]
    scores = scores + boost
    scores = scores.scatter_add(1, s[:, None], torch.full((len(s), 1),
                                                          -float(boost)))
    logp = scores.masked_fill(later, float("-inf")).log_softmax(-1)
    return logp.gather(1, s[:, None])[:, 0]
