#!/usr/bin/env python3
"""The documented recall run (docs/training.md, README): plans the tiny model at --seq 1024 on
examples/clusters/cpu-4.yaml with the hexiseq strategy, checks that the plan gives tokens to all
4 ranks and that the recall dictionary (the first eighth) and most recall queries (the second
half) lie on different ranks, then runs `mpirun -np 4 hexiseq train ... --steps 200` with the
default flags and checks that the recall loss (mean of the last 20 steps) ends below half of
chance (ln 4 / 2). Prints "train-recall: PASS" on success; exits 1 otherwise."""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

CHANCE = math.log(4.0)
LAST_STEPS = 20


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:
        sys.exit(f"command failed ({result.returncode}): {' '.join(cmd)}\n{result.stderr}")
    return result


def rank_of_positions(plan, seq):
    owner = [None] * seq
    # hexiseq.plan/2 lists groups per replica; plan/1 at the top level. This check takes
    # one-replica plans (the first replica holds every position).
    groups = plan["replicas"][0]["groups"] if "replicas" in plan else plan["groups"]
    for group in groups:
        for member in group["members"]:
            for begin, end in member["tokens"]:
                for position in range(begin, end):
                    owner[position] = member["rank"]
    return owner


def check_plan(plan, seq):
    owner = rank_of_positions(plan, seq)
    holding = sorted({rank for rank in owner if rank is not None})
    if holding != list(range(plan["num_ranks"])):
        sys.exit(f"the plan gives tokens to ranks {holding} only, not to all "
                 f"{plan['num_ranks']}")
    dictionary_ranks = {owner[p] for p in range((seq + 1) // 8)}
    second_half = range((seq + 1) // 2, seq)
    elsewhere = sum(owner[p] not in dictionary_ranks for p in second_half) / len(second_half)
    print(f"plan: dictionary on rank(s) {sorted(dictionary_ranks)}; {elsewhere:.0%} of the "
          f"second half on other ranks")
    if elsewhere < 0.5:
        sys.exit("most of the second half sits on the dictionary's rank: not a cross-shard test")


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--bin", "--cluster", "--model"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = os.path.join(tmp, "plan.json")
        run([args.bin, "plan", "--cluster", args.cluster, "--model", args.model, "--seq",
             str(args.seq), "--strategy", "hexiseq", "--format", "json", "-o", plan_path])
        with open(plan_path) as f:
            plan = json.load(f)
        check_plan(plan, args.seq)
        result = run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                      str(plan["num_ranks"]), args.bin, "train", "--plan", plan_path, "--model",
                      args.model, "--data", "synthetic:recall", "--steps", str(args.steps),
                      "--format", "json"])
    steps = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    if len(steps) != args.steps:
        sys.exit(f"expected {args.steps} steps, got {len(steps)}")
    recall = [step["recall_loss"] for step in steps]
    first = statistics.mean(recall[:LAST_STEPS])
    last = statistics.mean(recall[-LAST_STEPS:])
    print(f"recall loss: first {LAST_STEPS} steps {first:.4f}, last {LAST_STEPS} steps "
          f"{last:.4f}, chance {CHANCE:.4f}; total loss {steps[0]['loss']:.4f} -> "
          f"{steps[-1]['loss']:.4f}")
    if not last < CHANCE / 2:
        sys.exit(f"recall loss {last:.4f} did not fall below half of chance ({CHANCE / 2:.4f})")
    print("train-recall: PASS")


if __name__ == "__main__":
    main()
