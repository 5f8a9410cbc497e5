#!/usr/bin/python3
"""attn-check --slowdown 1=3 on a 2-rank ring plan (equal work per rank): rank 1's attention
kernel seconds (forward + backward, from attn-check's per-rank table) are 3x rank 0's within 20%,
and the result still passes the reference check. The ratio is taken relative to the same run
without --slowdown: the host's two cores need not run at the same speed (one rank per core), and
that ratio cancels."""
import argparse
import os
import subprocess
import sys
import tempfile

FACTOR, TOLERANCE = 3.0, 0.20
CLUSTER = "nodes:\n  - {gpu: H100-SXM, count: 1, gpus_per_node: 2}\n"


def run(command):
    print("+", " ".join(command), flush=True)
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"slowdown-check: FAIL: exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result.stdout


def attn_check(binary, plan, extra):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", binary, "attn-check",
            "--plan", plan, "--head-dim", "32"] + extra


def kernel_seconds(output):
    """Per rank: forward + backward attention kernel seconds from attn-check's table."""
    compute = {}
    for line in output.splitlines():
        fields = line.split()
        if len(fields) == 11 and fields[0] in ("0", "1"):
            compute[int(fields[0])] = float(fields[2]) + float(fields[7])
    if len(compute) != 2 or "result: PASS" not in output:
        sys.exit(f"slowdown-check: FAIL: unexpected attn-check output\n{output}")
    return compute


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster, plan = os.path.join(tmp, "two.yaml"), os.path.join(tmp, "ring.json")
        open(cluster, "w").write(CLUSTER)
        run([args.bin, "plan", "--cluster", cluster, "--model", args.model, "--seq", "6144",
             "--strategy", "ring", "--format", "json", "-o", plan])
        base = kernel_seconds(run(attn_check(args.bin, plan, [])))
        slowed = kernel_seconds(run(attn_check(args.bin, plan, ["--slowdown", f"1={FACTOR:g}"])))
    ratio = (slowed[1] / slowed[0]) / (base[1] / base[0])
    print(f"slowdown-check: kernel seconds rank 0 / rank 1: without slowdown {base[0]:.4f} / "
          f"{base[1]:.4f}, with {slowed[0]:.4f} / {slowed[1]:.4f}; ratio of ratios {ratio:.3f} "
          f"(want {FACTOR:g} +- {TOLERANCE:.0%})")
    if abs(ratio - FACTOR) > TOLERANCE * FACTOR:
        sys.exit("slowdown-check: FAIL")
    print("slowdown-check: PASS")


if __name__ == "__main__":
    main()
