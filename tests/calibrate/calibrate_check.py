#!/usr/bin/python3
"""calibrate end to end under mpirun (label mpi; --train: label slow).

Calibrates 2 ranks with --slowdown 1=2 and checks that rank 1's GEMM and attention rates are
0.5x rank 0's within 10%; plans hexiseq on the calibrated file and checks, with an independent
count of causal pairs x heads from the plan JSON, that rank 0 gets roughly twice rank 1's work.
With --train it trains the hexiseq and the ring plan (same --slowdown) and checks that the
hexiseq plan's median step is faster, a ratio within one run; the rate tolerance is then only
reported (calibrate_slowdown_np2 checks it), so each test checks one claim.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

RATE_TARGET, RATE_TOLERANCE = 0.5, 0.10  # rank 1 / rank 0 with --slowdown 1=2
WORK_LOW, WORK_HIGH = 1.5, 2.5           # "roughly twice"


def run(command):
    print("+", " ".join(command), flush=True)
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        sys.exit(f"calibrate-check: FAIL: exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result.stdout


def mpirun(np, args):
    return run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np)] + args)


def causal_pairs(ranges):
    # queries at positions [b, e) see keys 0..q: sum of (q + 1)
    return sum(e * (e + 1) // 2 - b * (b + 1) // 2 for b, e in ranges)


def work_per_rank(plan):
    """Causal pairs x heads computed by each rank: its heads over its group's tokens."""
    work = {}
    groups = [group for replica in plan["replicas"] for group in replica["groups"]]
    for group in groups:
        pairs = causal_pairs(group["tokens"])
        for member in group["members"]:
            work[member["rank"]] = len(member["heads"]) * pairs
    return work


def median_step_seconds(output):
    steps = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return statistics.median(step["seconds"] for step in steps[1:])  # step 0 warms up


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--seq", default="2048")
    parser.add_argument("--train", action="store_true")
    args = parser.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        cluster = os.path.join(tmp, "measured.yaml")
        mpirun(2, [args.bin, "calibrate", "--model", args.model, "--seq", args.seq,
                   "--slowdown", "1=2", "-o", cluster])
        measured = json.load(open(os.path.join(tmp, "measured.measurements.json")))
        ranks = measured["ranks"]
        for key in ("gemm_flops_per_second", "attention_flops_per_second"):
            ratio = ranks[1][key] / ranks[0][key]
            ok = abs(ratio - RATE_TARGET) <= RATE_TOLERANCE * RATE_TARGET
            print(f"calibrate-check: {key}: rank 1 / rank 0 = {ratio:.3f} "
                  f"(want {RATE_TARGET} +- {RATE_TOLERANCE:.0%}) {'ok' if ok else 'MISS'}")
            if not ok and not args.train:
                failures.append(key)
        plans = {}
        for strategy in ("hexiseq", "ring"):
            plans[strategy] = os.path.join(tmp, f"{strategy}.json")
            run([args.bin, "plan", "--cluster", cluster, "--model", args.model, "--seq", args.seq,
                 "--strategy", strategy, "--format", "json", "-o", plans[strategy]])
        work = work_per_rank(json.load(open(plans["hexiseq"])))
        work_ratio = work[0] / work[1] if work.get(1) else float("inf")
        ok = WORK_LOW <= work_ratio <= WORK_HIGH
        print(f"calibrate-check: hexiseq plan: rank 0 / rank 1 causal pairs x heads = "
              f"{work_ratio:.3f} (want {WORK_LOW}..{WORK_HIGH}) {'ok' if ok else 'MISS'}")
        if not ok:
            failures.append("work ratio")
        if args.train:
            seconds = {}
            for strategy, plan in plans.items():
                output = mpirun(2, [args.bin, "train", "--plan", plan, "--model", args.model,
                                    "--steps", "4", "--slowdown", "1=2", "--format", "json"])
                seconds[strategy] = median_step_seconds(output)
            speedup = seconds["ring"] / seconds["hexiseq"]
            print(f"calibrate-check: train median step: ring {seconds['ring']:.3f} s, hexiseq "
                  f"{seconds['hexiseq']:.3f} s, speedup {speedup:.3f}x (want > 1)")
            if speedup <= 1:
                failures.append("train speedup")
    if failures:
        sys.exit("calibrate-check: FAIL: " + ", ".join(failures))
    print("calibrate-check: PASS")


if __name__ == "__main__":
    main()
