#!/usr/bin/env python3
"""Gradient all-reduce overlapped with backward against the blocking all-reduce after it:
`hexiseq train --grad-sync overlap|blocking` on the same Ulysses plan (whose attention sums in a
fixed order, so the two modes must give bit-identical losses and gradient norms; checked before
any time is reported) for the bench model on 2 and 4 MPI ranks. The two modes alternate, run by
run, so that both see the same machine load. Reports medians over the steps after the first of
every run: step seconds, exposed sync seconds, and the overlap / blocking step-time ratio.

Usage: bench/train/grad_sync_bench.py [--ranks 2 4] [--seq 2048] [--steps 6] [--repeats 3]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_bench import BIN, MODEL, MPIRUN, cluster, header, sh  # noqa: E402


def train(plan, ranks, mode, steps):
    out = sh(MPIRUN + ["-np", str(ranks), BIN, "train", "--plan", plan, "--model", MODEL,
                       "--steps", str(steps), "--format", "json", "--grad-sync", mode])
    if out.returncode != 0:
        sys.exit(f"train --grad-sync {mode} on {ranks} ranks failed: {out.stderr[-500:]}")
    rows = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return [json.loads(line) for line in rows]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    header()
    print("| ranks | S | mode | step s | sync s (exposed) | overlap / blocking |")
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in args.ranks:
            plan = os.path.join(tmp, f"ulysses{ranks}.json")
            made = sh([BIN, "plan", "--cluster", cluster(tmp, ranks), "--model", MODEL, "--seq",
                       str(args.seq), "--strategy", "ulysses", "--format", "json", "-o", plan])
            if made.returncode != 0:
                sys.exit(f"plan failed: {made.stderr}")
            steps = {"overlap": [], "blocking": []}
            curves = {}
            for _ in range(args.repeats):
                for mode in ("overlap", "blocking"):
                    rows = train(plan, ranks, mode, args.steps)
                    curve = [(row["loss"], row["grad_norm"]) for row in rows]
                    if curves.setdefault(mode, curve) != curve:
                        sys.exit(f"{mode}: losses differ between repeats")
                    steps[mode].extend(rows[1:])
            if curves["overlap"] != curves["blocking"]:
                sys.exit(f"{ranks} ranks: overlap and blocking losses differ: "
                         f"{curves['overlap']} vs {curves['blocking']}")
            medians = {mode: statistics.median(row["seconds"] for row in rows)
                       for mode, rows in steps.items()}
            for mode, rows in steps.items():
                sync = statistics.median(row["grad_sync_seconds"] for row in rows)
                ratio = f"{medians['overlap'] / medians['blocking']:.3f}" if mode == "overlap" else ""
                print(f"| {ranks} | {args.seq} | {mode} | {medians[mode]:.4f} | {sync:.4f} | "
                      f"{ratio} |", flush=True)
    print("# losses and gradient norms bit-identical between the modes")


if __name__ == "__main__":
    sys.exit(main())
