#!/usr/bin/env python3
"""Step time of `hexiseq train` on 4 MPI ranks with 1, 2 and 4 data-parallel replicas taking the
same batch of 4 sequences (the bench model, bench/train/small.yaml):

  1 replica     USP 2x2 over ranks 0-3, every sequence spread over all 4 ranks
  2 replicas    3+1: ranks 0-2 (2 CP groups, HP 2 in the first) take 3 sequences, rank 3 takes 1
  2 replicas    2+2: ranks 0-1 and 2-3 (HP 2 each) take 2 sequences each
  4 replicas    each rank alone takes 1 sequence (pure data parallelism)

Before any time is reported, every configuration's step-0 loss must equal the 1-replica run's
within 1e-5 relative (the same batch, so the same loss). Configurations alternate run by run so
that all see the same machine load. Reports the median step seconds over the steps after the
first of every run, and the ratio to the 1-replica median.

Usage: bench/train/replicas_bench.py [--seq 1024] [--steps 5] [--repeats 2]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_bench import BIN, HEADS, KV_HEADS, MODEL, MPIRUN, header, sh  # noqa: E402

BATCH = 4
LOSS_TOLERANCE = 1e-5


def split(ranges, parts):
    """`ranges` (a list of [begin, end)) cut into `parts` consecutive pieces of equal length."""
    flat = [position for begin, end in ranges for position in range(begin, end)]
    size = len(flat)
    pieces = []
    for part in range(parts):
        chunk = flat[part * size // parts:(part + 1) * size // parts]
        runs = []
        for position in chunk:
            if runs and runs[-1][1] == position:
                runs[-1][1] += 1
            else:
                runs.append([position, position + 1])
        pieces.append(runs)
    return pieces


def layout(group_ranks, seq):
    """One group per rank list (CP over the groups, zigzag over 2 chunks per group, the last
    group taking the middle), HP inside a group: contiguous shards and head blocks."""
    cp = len(group_ranks)
    chunk = seq // (2 * cp)
    groups = []
    for group, ranks in enumerate(group_ranks):
        tokens = [[group * chunk, (group + 1) * chunk],
                  [seq - (group + 1) * chunk, seq - group * chunk]]
        if group == cp - 1:
            tokens = [[group * chunk, seq - group * chunk]]
        hp = len(ranks)
        members = [{"rank": rank, "tokens": shard,
                    "heads": list(range(member * HEADS // hp, (member + 1) * HEADS // hp))}
                   for member, (rank, shard) in enumerate(zip(ranks, split(tokens, hp)))]
        groups.append({"ranks": ranks, "tokens": tokens, "members": members})
    return groups


def plan(seq, replicas):
    """replicas: [(group rank lists, sequences)]."""
    return {"format": "hexiseq.plan/2", "strategy": "bench", "model": "bench-small",
            "seq_len": seq, "batch": BATCH, "recompute": "full", "zero_stage": 0,
            "num_heads": HEADS, "num_kv_heads": KV_HEADS, "num_ranks": 4,
            "replicas": [{"sequences": sequences, "groups": layout(groups, seq)}
                         for groups, sequences in replicas]}


CONFIGS = [
    ("1 replica (USP 2x2)", [([[0, 1], [2, 3]], 4)]),
    ("2 replicas 3+1", [([[0, 1], [2]], 3), ([[3]], 1)]),
    ("2 replicas 2+2 (HP 2)", [([[0, 1]], 2), ([[2, 3]], 2)]),
    ("4 replicas 1+1+1+1", [([[rank]], 1) for rank in range(4)]),
]


def train(path, steps):
    out = sh(MPIRUN + ["-np", "4", BIN, "train", "--plan", path, "--model", MODEL, "--steps",
                       str(steps), "--format", "json"])
    if out.returncode != 0:
        sys.exit(f"train --plan {path} failed: {out.stderr[-800:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    header()
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, replicas in CONFIGS:
            content = plan(args.seq, replicas)
            paths[name] = os.path.join(tmp, f"{len(paths)}.json")
            with open(paths[name], "w") as f:
                json.dump(content, f)
        seconds = {name: [] for name in paths}
        loss0 = {}
        for _ in range(args.repeats):
            for name, path in paths.items():
                rows = train(path, args.steps)
                loss0.setdefault(name, rows[0]["loss"])
                seconds[name].extend(row["seconds"] for row in rows[1:])
    reference = loss0[CONFIGS[0][0]]
    for name, loss in loss0.items():
        if abs(loss - reference) > LOSS_TOLERANCE * abs(reference):
            sys.exit(f"{name}: step-0 loss {loss!r} differs from the 1-replica {reference!r}")
    print(f"# S = {args.seq}, batch {BATCH}, 4 ranks, {args.steps} steps x {args.repeats} runs; "
          f"step-0 losses agree within {LOSS_TOLERANCE:g} (1 replica: {reference:.6f})")
    print("| plan | median step s | ratio to 1 replica |")
    print("| --- | --- | --- |")
    base = statistics.median(seconds[CONFIGS[0][0]])
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.3f} | {median / base:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
