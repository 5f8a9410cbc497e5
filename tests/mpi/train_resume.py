#!/usr/bin/env python3
"""`hexiseq train --save` then `--resume` under mpirun: the resumed run's losses and final weights
are bit-identical to an uninterrupted run with the same plan and process count. Prints
"train-resume: PASS" on success; exits 1 otherwise."""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def train(args, extra):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(args.np), args.bin,
           "train", "--plan", args.plan, "--model", args.model, "--format", "json",
           "--lr", "3e-3", "--warmup", "2"] + extra
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{result.stderr}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--bin", "--plan", "--model"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--np", type=int, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        full_dir, part_dir = os.path.join(tmp, "full"), os.path.join(tmp, "part")
        full = train(args, ["--steps", "6", "--save", full_dir])
        train(args, ["--steps", "6", "--save", part_dir, "--save-every", "3"])
        # Keep only the step-3 checkpoint as the latest, as if the run had stopped there.
        with open(os.path.join(part_dir, "latest"), "w") as f:
            f.write("step-00000003\n")
        resumed = train(args, ["--steps", "6", "--resume", part_dir, "--save", part_dir])
        ok = [row["step"] for row in resumed] == [3, 4, 5]
        for row in resumed:
            if row["loss"] != full[row["step"]]["loss"]:
                print(f"step {row['step']}: resumed loss {row['loss']!r} != {full[row['step']]['loss']!r}")
                ok = False
        with open(os.path.join(full_dir, "step-00000006", "model.safetensors"), "rb") as f:
            full_weights = f.read()
        with open(os.path.join(part_dir, "step-00000006", "model.safetensors"), "rb") as f:
            resumed_weights = f.read()
        if full_weights != resumed_weights:
            print("final weights differ")
            ok = False
    print("train-resume: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
