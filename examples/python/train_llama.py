#!/usr/bin/env python3
"""A tiny Llama (RMSNorm, RoPE, GQA, SwiGLU) in plain PyTorch, trained with HexiSeq attention.

Every rank holds the plan's token shard of the sequence (context + head parallelism); the only
HexiSeq-specific lines are the Context and the attention call. Weights are replicated and their
gradients summed over the ranks, so the losses equal a single-process run up to rounding.

    python3 -m torch.distributed.run --nproc_per_node 4 --redirects 1 --tee 1 \
        examples/python/train_llama.py --plan plan.json   # from `hexiseq plan ... -o plan.json`
    python3 -m torch.distributed.run --nproc_per_node 4 --redirects 1 --tee 1 \
        examples/python/train_llama.py --cluster examples/clusters/custom-4.yaml  # plan at start

(--redirects 1 --tee 1: torch 1.13's torchrun cannot parse its default "0" under Python 3.11.)
"""

import argparse
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import hexiseq
import hexiseq.torch as hxt


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rope(x, positions, theta=10000.0):
    """Rotary embedding of x [tokens, heads, head_dim] at global token positions."""
    half = x.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, dtype=torch.float32) / half)
    angles = positions.to(torch.float32)[:, None] * freqs[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, x, positions, ctx):
        tokens = x.shape[0]
        q = rope(self.q(x).view(tokens, self.heads, self.head_dim), positions)
        k = rope(self.k(x).view(tokens, self.kv_heads, self.head_dim), positions)
        v = self.v(x).view(tokens, self.kv_heads, self.head_dim)
        out = hxt.attention(q, k, v, ctx)  # the one HexiSeq line: distributed causal attention
        return self.o(out.reshape(tokens, -1))


class MLP(nn.Module):
    def __init__(self, hidden, ffn_hidden):
        super().__init__()
        self.gate = nn.Linear(hidden, ffn_hidden, bias=False)
        self.up = nn.Linear(hidden, ffn_hidden, bias=False)
        self.down = nn.Linear(ffn_hidden, hidden, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(spec.hidden), RMSNorm(spec.hidden)
        self.attn = Attention(spec.hidden, spec.heads, spec.kv_heads)
        self.mlp = MLP(spec.hidden, spec.ffn_hidden)

    def forward(self, x, positions, ctx):
        x = x + self.attn(self.attn_norm(x), positions, ctx)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.embed = nn.Embedding(spec.vocab, spec.hidden)
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.layers))
        self.norm = RMSNorm(spec.hidden)
        self.head = nn.Linear(spec.hidden, spec.vocab, bias=False)

    def forward(self, tokens, positions, ctx):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, positions, ctx)
        return self.head(self.norm(x))


def parse_args():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--plan", help="plan JSON (hexiseq plan ... -o FILE); else plan at start-up")
    p.add_argument("--cluster", default=os.path.join(root, "examples/clusters/custom-4.yaml"))
    p.add_argument("--strategy", default="hexiseq")
    p.add_argument("--model", default=os.path.join(root, "examples/models/tiny.yaml"))
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence (with --cluster)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--data", help="a file whose bytes are the tokens (default: random tokens)")
    p.add_argument("--losses", help="write the per-step losses as JSON here (rank 0)")
    return p.parse_args()


def load_tokens(args, seq_len, vocab):
    """seq_len + 1 tokens, the same on every rank."""
    if args.data:
        with open(args.data, "rb") as f:
            data = torch.tensor(list(f.read(seq_len + 1)), dtype=torch.long)
        return data % vocab
    generator = torch.Generator().manual_seed(args.seed)
    return torch.randint(0, vocab, (seq_len + 1,), generator=generator)


def main():
    args = parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    spec = hexiseq.model(args.model)
    plan = (hexiseq.Plan.load(args.plan) if args.plan else
            hexiseq.plan(args.cluster, spec, args.seq, strategy=args.strategy))
    ctx = hxt.Context(plan)
    tokens = load_tokens(args, plan.seq_len, spec.vocab)
    inputs, targets = ctx.shard(tokens[:-1]), ctx.shard(tokens[1:])

    torch.manual_seed(args.seed)  # identical initial weights on every rank
    model = Llama(spec)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses = []
    for step in range(args.steps):
        start = time.perf_counter()
        logits = model(inputs, ctx.positions, ctx)
        # Sum over this rank's tokens / all tokens: the ranks' losses add up to the mean.
        loss = F.cross_entropy(logits, targets, reduction="sum") / plan.seq_len
        optimizer.zero_grad()
        loss.backward()
        for param in model.parameters():  # replicated weights: sum the partial gradients
            dist.all_reduce(param.grad)
        optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        seconds = time.perf_counter() - start
        losses.append(total.item())
        if rank == 0:
            print(f"step {step}: loss {total.item():.6f}, {plan.seq_len / seconds:.0f} tokens/s",
                  flush=True)
    if rank == 0 and args.losses:
        with open(args.losses, "w") as f:
            json.dump({"losses": losses, "world_size": dist.get_world_size(),
                       "perplexity": math.exp(losses[-1])}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
