#!/usr/bin/python3
"""`hexiseq calibrate --combine` end to end, without measuring: three sidecars of one 2-rank job
(written here, rank 1 at half rank 0's speed, each run at another overall speed) combine into a
cluster file whose rates are the medians, and which `hexiseq plan` reads; bad usage is refused.
Prints "combine-check: PASS" when every check holds."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SIZES = [256, 512, 1024, 2048]  # S / 4N ... S; the even split is 1024


def curve(flops_per_token, rate):
    return [{"tokens": tokens, "flops": flops_per_token * tokens,
             "seconds": flops_per_token * tokens / rate,
             "flops_per_second": rate} for tokens in SIZES]


def sidecar(speed):
    """One calibration: rank 0 computes at `speed` x 60 GFLOP/s, rank 1 at half of that."""
    ranks = []
    for rank, share in ((0, 1.0), (1, 0.5)):
        gemm, attention = 60e9 * speed * share, 50e9 * speed * share
        ranks.append({"rank": rank, "host": "node", "slowdown": 1.0 / share,
                      "gemm_flops_per_second": gemm, "attention_flops_per_second": attention,
                      "gemm_curve": curve(3e6, gemm), "attention_curve": curve(2e6, attention),
                      "optimizer_params": 1e6, "optimizer_seconds": 0.01 / speed / share})
    latency, bandwidth = 5e-6 / speed, 4e9 * speed
    sizes = [8, 1 << 16, 1 << 20]
    pair = {"ranks": [0, 1], "latency_seconds": latency, "bytes_per_second": bandwidth,
            "message_bytes": sizes, "one_way_seconds": [latency + size / bandwidth
                                                        for size in sizes]}
    return {"format": "hexiseq.calibration/1", "model": "gqa", "seq_len": 2048, "num_ranks": 2,
            "even_shard_tokens": 1024, "slowdown_padding": "spin",
            "linear_probe": "one layer's GEMMs (sgemm)",
            "optimizer_probe": "a plain AdamW loop over fp32 arrays", "host_memory_bytes": 8 << 30,
            "ranks": ranks, "pairs": [pair],
            "all_to_all": [{"bytes_per_peer": 1 << 16, "seconds": 1e-4 / speed,
                            "alpha_beta_seconds": 0.9e-4 / speed}]}


def hexiseq(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)


def check(condition, message):
    if not condition:
        sys.exit(f"combine-check: FAIL: {message}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="combine-check-")
    speeds = [1.0, 0.8, 1.1]
    paths = []
    for index, speed in enumerate(speeds):
        paths.append(os.path.join(work, f"run-{index}.measurements.json"))
        json.dump(sidecar(speed), open(paths[-1], "w"))
    out = os.path.join(work, "median.yaml")
    result = hexiseq(args.bin, "calibrate", "--combine", ",".join(paths), "-o", out)
    check(result.returncode == 0, f"combine exited {result.returncode}: {result.stderr}")
    combined = json.load(open(os.path.join(work, "median.measurements.json")))
    median = statistics.median(speeds)
    for rank, share in ((0, 1.0), (1, 0.5)):
        got = combined["ranks"][rank]["gemm_flops_per_second"]
        want = 60e9 * median * share
        check(abs(got - want) <= 1e-9 * want, f"rank {rank} GEMM rate {got}, want {want}")
    check(combined["combined_from"] == paths, f"combined_from {combined['combined_from']}")
    bandwidth = combined["pairs"][0]["bytes_per_second"]
    check(abs(bandwidth - 4e9 * median) <= 1e-9 * bandwidth, f"bandwidth {bandwidth}")
    check("the median of 3 calibrations" in open(out).read(), "cluster file comment")
    planned = hexiseq(args.bin, "plan", "--cluster", out, "--model", args.model, "--seq", "2048",
                      "--format", "json")
    check(planned.returncode == 0, f"plan on the combined file: {planned.stderr}")
    ranks = json.loads(planned.stdout)["predicted"]["ranks"]
    check(len(ranks) == 2, f"the plan has {len(ranks)} ranks")
    # Bad usage: a measuring flag with --combine (exit 2), a missing file (exit 1), no --model.
    mixed = hexiseq(args.bin, "calibrate", "--combine", paths[0], "--seq", "4096", "-o", out)
    check(mixed.returncode == 2 and "--seq is given with --combine" in mixed.stderr,
          f"--seq with --combine: {mixed.returncode} {mixed.stderr}")
    missing = hexiseq(args.bin, "calibrate", "--combine", paths[0] + ",nope.json", "-o", out)
    check(missing.returncode == 1 and "nope.json" in missing.stderr,
          f"missing file: {missing.returncode} {missing.stderr}")
    no_model = hexiseq(args.bin, "calibrate", "--seq", "4096", "-o", out)
    check(no_model.returncode == 2 and "--model is required" in no_model.stderr,
          f"no --model: {no_model.returncode} {no_model.stderr}")
    print("combine-check: PASS")


if __name__ == "__main__":
    main()
