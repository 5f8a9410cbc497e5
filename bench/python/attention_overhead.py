#!/usr/bin/env python3
"""The Python path's overhead on hexiseq.torch.attention: wall time of the autograd call in
Python against the C++ runtime's own time for the same forward and backward, per rank, in one
run (medians over repeats after a warm-up). Checks the output first on sampled rows against a
float64 causal attention computed on rank 0. Launch under torchrun, e.g.:

    python3 -m torch.distributed.run --nproc_per_node 4 --redirects 1 --tee 1 \
        bench/python/attention_overhead.py --plan bench/runtime/plans/asym4.json --head-dim 64
"""

import argparse
import math
import os
import platform
import statistics
import subprocess
import time

import torch
import torch.distributed as dist

import hexiseq
import hexiseq.torch as hxt

SAMPLED_ROWS = 64
TOLERANCE = 1e-5


def header():
    root = os.path.dirname(os.path.abspath(__file__))
    commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    return (f"# attention_overhead  commit {commit}  torch {torch.__version__}  "
            f"python {platform.python_version()}  cpu {cpu}  ranks {dist.get_world_size()}")


def check_sampled_rows(ctx, q, k, v, o):
    """Rank 0: o at SAMPLED_ROWS random positions equals float64 causal GQA attention."""
    full = [ctx.gather(t) for t in (q, k, v, o)]
    if ctx.rank != 0:
        return 0.0
    q, k, v, o = (t.double() for t in full)
    group = q.shape[1] // k.shape[1]
    rows = torch.randperm(q.shape[0], generator=torch.Generator().manual_seed(3))[:SAMPLED_ROWS]
    worst = 0.0
    for row in rows.tolist():
        keys = k[: row + 1].repeat_interleave(group, dim=1)
        values = v[: row + 1].repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,khd->hk", q[row], keys) / math.sqrt(q.shape[2])
        expected = torch.einsum("hk,khd->hd", scores.softmax(-1), values)
        worst = max(worst, ((o[row] - expected).abs().max() / expected.abs().max()).item())
    return worst


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--plan", required=True)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    dist.init_process_group("gloo")
    ctx = hxt.Context(hexiseq.Plan.load(args.plan))
    torch.manual_seed(11 + ctx.rank)
    n, d = ctx.num_tokens, args.head_dim
    q = torch.randn(n, ctx.plan.num_heads, d, requires_grad=True)
    k, v = (torch.randn(n, ctx.plan.num_kv_heads, d, requires_grad=True) for _ in range(2))
    error = check_sampled_rows(ctx, q.detach(), k.detach(), v.detach(),
                               hxt.attention(q, k, v, ctx).detach())
    if ctx.rank == 0:
        print(header(), flush=True)
        print(f"check: max relative error on {SAMPLED_ROWS} sampled rows {error:.2e} "
              f"({'PASS' if error <= TOLERANCE else 'FAIL'})", flush=True)
        if error > TOLERANCE:
            raise SystemExit(1)
    rows = []
    for _ in range(args.repeats + 1):  # the first is a warm-up
        dist.barrier()
        start = time.perf_counter()
        o = hxt.attention(q, k, v, ctx)
        middle = time.perf_counter()
        o.backward(torch.ones_like(o))
        end = time.perf_counter()
        rows.append((middle - start, ctx.last_forward_times["total"], end - middle,
                     ctx.last_backward_times["total"]))
    medians = [statistics.median(column) for column in zip(*rows[1:])]
    table = [None] * ctx.world_size
    dist.all_gather_object(table, (ctx.rank, n, len(ctx.heads), medians))
    if ctx.rank == 0:
        print("| rank | tokens | heads | fwd python s | fwd C++ s | bwd python s | bwd C++ s |"
              " overhead fwd+bwd |")
        print("|---|---|---|---|---|---|---|---|")
        for rank, tokens, heads, (fp, fc, bp, bc) in table:
            print(f"| {rank} | {tokens} | {heads} | {fp:.4f} | {fc:.4f} | {bp:.4f} | {bc:.4f} |"
                  f" {(fp + bp) / (fc + bc):.3f}x |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
