#!/usr/bin/env python3
"""Training benchmark: tokens/s and per-phase seconds of `hexiseq train` for each strategy's plan
on 1, 2 and 4 MPI ranks (a homogeneous cluster of as many devices), the 1-rank FLOP rate against
the OpenBLAS sgemm rate measured in the same run (through torch.mm on 1 thread), the 2-rank ring
step time against half the 1-rank time, and each run's peak RSS per rank. Medians over the steps
after the first (warm-up). Prints a header (commit, compiler, CPU) and a Markdown table.

Usage: bench/train/train_bench.py [--seqs 4096 8192] [--ranks 1 2 4] [--steps 4]
                                  [--strategies ring ulysses usp hetero-ring subset hexiseq]
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
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "bin", "hexiseq")
MODEL = os.path.join(ROOT, "bench", "train", "small.yaml")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
STRATEGIES = ["ring", "ulysses", "usp", "hetero-ring", "subset", "hexiseq"]
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 4, 256, 8, 2, 32, 768, 256


def sh(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=3600)


def header():
    commit = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).stdout.strip()
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    compiler = sh(["c++", "--version"]).stdout.splitlines()[0]
    print(f"# commit {commit}, Release build, {compiler}, {cpu}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}, {platform.platform()}")


def sgemm_gflops():
    code = ("import torch,time\ntorch.set_num_threads(1)\na=torch.randn(1024,1024)\n"
            "b=torch.randn(1024,1024)\ntorch.mm(a,b)\nbest=1e9\n"
            "for _ in range(5):\n t=time.perf_counter();torch.mm(a,b);best=min(best,"
            "time.perf_counter()-t)\nprint(2*1024**3/best/1e9)")
    out = sh(["/usr/bin/python3", "-c", code])
    return float(out.stdout.strip()) if out.returncode == 0 else float("nan")


def step_flops(seq):
    """Model FLOPs of one step with full recompute (forward x 4: forward, recompute, backward x 2),
    attention counted causally (backward 2.5x forward), like the cost model."""
    layer_params = HIDDEN * HEADS * HEAD_DIM * 2 + 2 * HIDDEN * KV_HEADS * HEAD_DIM + 3 * HIDDEN * FFN
    linear = 2 * seq * layer_params * LAYERS * 4 + 2 * seq * HIDDEN * VOCAB * 3
    pairs = seq * (seq + 1) / 2
    attention = 4 * HEAD_DIM * HEADS * pairs * LAYERS * (1 + 1 + 2.5)
    return linear + attention


def cluster(tmp, ranks):
    path = os.path.join(tmp, f"cluster{ranks}.yaml")
    with open(path, "w") as f:
        f.write(f"name: cpu-{ranks}\nnodes:\n  - gpu: H100-SXM\n    count: 1\n"
                f"    gpus_per_node: {ranks}\n")
    return path


def run(tmp, ranks, strategy, seq, steps):
    plan = os.path.join(tmp, f"plan-{strategy}-{ranks}-{seq}.json")
    made = sh([BIN, "plan", "--cluster", cluster(tmp, ranks), "--model", MODEL, "--seq", str(seq),
               "--strategy", strategy, "--format", "json", "-o", plan])
    if made.returncode != 0:
        return None
    out = sh(MPIRUN + ["-np", str(ranks), BIN, "train", "--plan", plan, "--model", MODEL,
                       "--steps", str(steps), "--format", "json"])
    if out.returncode != 0:
        print(f"# {strategy} {ranks} ranks S={seq}: failed: {out.stderr.strip()[-300:]}")
        return None
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    rss = re.search(r"peak RSS per rank: (.*)", out.stderr)
    timed = rows[1:] if len(rows) > 1 else rows
    result = {key: statistics.median(row[key] for row in timed) for key in timed[0]
              if isinstance(timed[0][key], float)}
    result["rss"] = rss.group(1) if rss else "?"
    return result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seqs", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--strategies", nargs="+", default=STRATEGIES)
    args = parser.parse_args()
    header()
    gflops = sgemm_gflops()
    print(f"# OpenBLAS sgemm 1024^3, 1 thread: {gflops:.1f} GFLOP/s")
    print("| S | ranks | strategy | step s | tokens/s | linear s | attn s | a2a s | wait s | "
          "sync s | peak RSS per rank |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for seq in args.seqs:
            single = None
            for ranks in args.ranks:
                for strategy in (["ring"] if ranks == 1 else args.strategies):
                    r = run(tmp, ranks, strategy, seq, args.steps)
                    if r is None:
                        continue
                    print(f"| {seq} | {ranks} | {strategy if ranks > 1 else 'single'} | "
                          f"{r['seconds']:.3f} | {r['tokens_per_second']:.0f} | "
                          f"{r['linear_seconds']:.3f} | {r['attention_compute_seconds']:.3f} | "
                          f"{r['alltoall_seconds']:.3f} | {r['ring_wait_seconds']:.3f} | "
                          f"{r['grad_sync_seconds']:.3f} | {r['rss']} |", flush=True)
                    if ranks == 1:
                        single = r
                        rate = step_flops(seq) / r["seconds"] / 1e9
                        print(f"# S={seq} 1 rank: {rate:.1f} GFLOP/s = "
                              f"{100 * rate / gflops:.0f}% of sgemm", flush=True)
                    if ranks == 2 and strategy == "ring" and single:
                        print(f"# S={seq} 2-rank ring step / (1-rank step / 2) = "
                              f"{r['seconds'] / (single['seconds'] / 2):.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
