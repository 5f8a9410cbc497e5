"""One rank of a multi-process hexiseq.torch.attention check (started by test_attention.py).

For each plan: the same random full q, k, v and output weights on every rank; this rank's shard
goes through hexiseq.torch.attention (fp32) with autograd; the first rank of each replica compares
its replica's gathered output and q/k/v gradients with a single-process causal GQA attention in
float64 (an independent reference: plain PyTorch autograd) and prints one JSON line per plan; a
rank the plan leaves out prints whether attention raised for it. Errors print
"ERROR <class>: <message>" on every rank that raised.
"""

import argparse
import json
import math
import sys

import torch
import torch.distributed as dist

import hexiseq
import hexiseq.torch as hxt

TOLERANCE = 1e-5  # relative: max |ours - reference| / max |reference|


def reference(q, k, v, weights):
    """Causal GQA attention in float64 and the gradients of sum(o * weights)."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    tokens, heads, head_dim = q.shape
    group = heads // k.shape[1]
    kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, kk) / math.sqrt(head_dim)
    mask = torch.ones(tokens, tokens, dtype=torch.bool).tril()
    probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
    o = torch.einsum("hqk,khd->qhd", probs, vv)
    (o * weights.double()).sum().backward()
    return o.detach(), q.grad, k.grad, v.grad


def rel_error(ours, ref):
    scale = ref.abs().max().item() or 1.0
    return (ours.double() - ref).abs().max().item() / scale


def check_left_out(ctx):
    """A left-out rank's Context: no tokens, and attention raises naming the rule."""
    try:
        hxt.attention(*(torch.zeros(0, 1, 1) for _ in range(3)), ctx)
    except hexiseq.InvalidArgumentError as error:
        return {"left_out": True, "replica": ctx.replica, "raised": str(error), "report": True}
    return {"left_out": True, "raised": "", "report": True}


def check_plan(plan, head_dim, seed, heads_override, group=None):
    ctx = hxt.Context(plan, group)
    if ctx.left_out:
        return check_left_out(ctx)
    generator = torch.Generator().manual_seed(seed)
    seq, heads, kv = plan.seq_len, plan.num_heads, plan.num_kv_heads
    heads = heads_override or heads
    q, weights = (torch.randn(seq, heads, head_dim, generator=generator) for _ in range(2))
    k, v = (torch.randn(seq, kv, head_dim, generator=generator) for _ in range(2))
    local = [ctx.shard(t).clone().requires_grad_() for t in (q, k, v)]
    o = hxt.attention(*local, ctx)
    (o * ctx.shard(weights)).sum().backward()
    ours = [ctx.gather(t) for t in (o, local[0].grad, local[1].grad, local[2].grad)]
    result = {"plan": plan.strategy + " " + plan.config, "ranks": ctx.world_size,
              "replica": ctx.replica, "report": ctx.rank == 0}
    if ctx.rank == 0:  # the first rank of each replica
        refs = reference(q, k, v, weights)
        errors = {name: rel_error(a, b) for name, a, b in zip(("o", "dq", "dk", "dv"), ours, refs)}
        result["errors"] = errors
        result["pass"] = all(e <= TOLERANCE for e in errors.values())
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--init", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--plans", nargs="+", required=True)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--heads-override", type=int, default=0)
    p.add_argument("--plan-for-last-rank", help="a different plan file for the last rank")
    p.add_argument("--subgroups", type=int, default=1,
                   help="split the world into this many equal groups, one Context on each")
    args = p.parse_args()
    dist.init_process_group("gloo", init_method=args.init, rank=args.rank, world_size=args.world)
    group = None
    if args.subgroups > 1:  # every rank creates every group, in the same order
        size = args.world // args.subgroups
        groups = [dist.new_group(list(range(first, first + size)))
                  for first in range(0, args.world, size)]
        group = groups[args.rank // size]
    ok = True
    for index, path in enumerate(args.plans):
        if args.plan_for_last_rank and args.rank == args.world - 1:
            path = args.plan_for_last_rank
        try:
            result = check_plan(hexiseq.Plan.load(path), args.head_dim, 100 + index,
                                args.heads_override, group)
        except hexiseq.Error as error:
            print(f"ERROR {type(error).__name__}: {error}", flush=True)
            ok = False
            continue
        if result["report"]:
            print(json.dumps({"index": index, **result}), flush=True)
            ok = ok and result.get("pass", True)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
