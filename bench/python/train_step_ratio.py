#!/usr/bin/env python3
"""The Python path against the C++ path for the same plan and model: step seconds of
examples/python/train_llama.py (a plain PyTorch Llama whose attention is hexiseq.torch.attention,
under torchrun with gloo, gradients summed by torch.distributed.all_reduce) against
`hexiseq train --recompute none` (libtorch model, MPI, bucketed all-reduce) on the same plan, in
one run, alternating the two paths run by run so both see the same machine load. Both paths'
losses are checked to fall (so both really train) before times are reported. Medians over the
steps after the first of every run.

Usage: bench/python/train_step_ratio.py [--cluster examples/clusters/cpu-4.yaml]
           [--model examples/models/tiny.yaml] [--seq 1024] [--steps 8] [--repeats 3]
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "bin", "hexiseq")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
STEP_LINE = re.compile(r"step (\d+): loss ([0-9.]+), ([0-9]+) tokens/s")


def sh(cmd, env=None):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(cmd)}\n{result.stderr[-1500:]}")
    return result.stdout


def header():
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    print(f"# train_step_ratio  commit {commit}  Release build  cpu {cpu}  {os.cpu_count()} cores"
          f"  load {os.getloadavg()[0]:.1f}  python {platform.python_version()}")


def python_steps(plan, args, ranks):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"),
               OMP_NUM_THREADS="1")
    out = sh([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
              str(ranks), "--redirects", "1", "--tee", "1",
              os.path.join(ROOT, "examples", "python", "train_llama.py"), "--plan", plan,
              "--model", args.model, "--steps", str(args.steps)], env=env)
    rows = [STEP_LINE.search(line) for line in out.splitlines()]
    rows = [(int(m.group(1)), float(m.group(2)), int(m.group(3))) for m in rows if m]
    rows.sort()
    if len(rows) != args.steps:
        sys.exit(f"python: expected {args.steps} step lines, got {len(rows)}:\n{out[-1500:]}")
    return [loss for _, loss, _ in rows], [args.seq / rate for _, _, rate in rows[1:]]


def cpp_steps(plan, args, ranks):
    out = sh(MPIRUN + ["-np", str(ranks), BIN, "train", "--plan", plan, "--model", args.model,
                       "--steps", str(args.steps), "--recompute", "none", "--format", "json"])
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [row["loss"] for row in rows], [row["seconds"] for row in rows[1:]]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster", default=os.path.join(ROOT, "examples/clusters/cpu-4.yaml"))
    parser.add_argument("--model", default=os.path.join(ROOT, "examples/models/tiny.yaml"))
    parser.add_argument("--strategy", default="hexiseq")
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    header()
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "plan.json")
        sh([BIN, "plan", "--cluster", args.cluster, "--model", args.model, "--seq",
            str(args.seq), "--strategy", args.strategy, "--format", "json", "-o", plan])
        with open(plan) as f:
            ranks = json.load(f)["num_ranks"]
        seconds = {"python": [], "cpp": []}
        for _ in range(args.repeats):
            for path, run in (("python", python_steps), ("cpp", cpp_steps)):
                losses, times = run(plan, args, ranks)
                if not losses[-1] < losses[0]:
                    sys.exit(f"{path}: loss did not fall ({losses[0]} -> {losses[-1]})")
                seconds[path].extend(times)
    python, cpp = (statistics.median(seconds[path]) for path in ("python", "cpp"))
    print(f"| plan | ranks | S | Python step s | C++ step s | Python / C++ |")
    print(f"| --- | --- | --- | --- | --- | --- |")
    print(f"| {args.strategy} on {os.path.basename(args.cluster)} | {ranks} | {args.seq} | "
          f"{python:.4f} | {cpp:.4f} | {python / cpp:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
