#!/usr/bin/env python3
"""Runs `hexiseq train` on a planner-made plan with N MPI ranks and on a one-rank plan of the same
sequence, and checks that the step-0 loss agrees within 1e-5 and the whole loss curve within 1e-4
(relative). Prints "train-compare: PASS" on success; exits 1 otherwise."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

BATCH = 2  # sequences per step, in both plans (train takes the plan's)


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"command failed ({result.returncode}): {' '.join(cmd)}\n{result.stderr}")
    return result.stdout


def losses(mpirun, np, binary, plan, args, extra=()):
    out = run(mpirun + ["-np", str(np), binary, "train", "--plan", plan, "--model", args.model,
                        "--data", args.data, "--steps", str(args.steps), "--format", "json",
                        "--lr", "3e-3", "--warmup", "3", *extra])
    return [json.loads(line)["loss"] for line in out.splitlines() if line.startswith("{")]


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--bin", "--cluster", "--model", "--strategy"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--data", default="synthetic:recall")
    parser.add_argument("--comm-wait", default="spin", help="train --comm-wait of the N-rank run")
    args = parser.parse_args()
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = os.path.join(tmp, "plan.json")
        run([args.bin, "plan", "--cluster", args.cluster, "--model", args.model, "--seq",
             str(args.seq), "--strategy", args.strategy, "--batch", str(BATCH), "--format", "json",
             "-o", plan_path])
        with open(plan_path) as f:
            plan = json.load(f)
        single = {"format": "hexiseq.plan/1", "strategy": "single", "model": plan["model"],
                  "seq_len": args.seq, "batch": BATCH, "num_heads": plan["num_heads"],
                  "num_kv_heads": plan["num_kv_heads"], "num_ranks": 1,
                  "groups": [{"ranks": [0], "tokens": [[0, args.seq]],
                              "members": [{"rank": 0, "tokens": [[0, args.seq]],
                                           "heads": list(range(plan["num_heads"]))}]}]}
        single_path = os.path.join(tmp, "single.json")
        with open(single_path, "w") as f:
            json.dump(single, f)
        reference = losses(mpirun, 1, args.bin, single_path, args)
        distributed = losses(mpirun, plan["num_ranks"], args.bin, plan_path, args,
                             ["--comm-wait", args.comm_wait])
    ok = len(reference) == len(distributed) == args.steps
    worst = 0.0
    for step, (a, b) in enumerate(zip(distributed, reference)):
        rel = abs(a - b) / abs(b)
        worst = max(worst, rel)
        if rel > (1e-5 if step == 0 else 1e-4):
            print(f"step {step}: loss {a!r} with {plan['num_ranks']} ranks vs {b!r} with 1 "
                  f"(relative {rel:.2e})")
            ok = False
    print(f"{args.strategy}: {plan['num_ranks']} ranks, {len(distributed)} steps, worst relative "
          f"loss difference {worst:.2e}")
    print("train-compare: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
