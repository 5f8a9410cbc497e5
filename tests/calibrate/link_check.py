#!/usr/bin/python3
"""--link-slowdown end to end under mpirun (label mpi).

1. calibrate on 3 ranks with --link-slowdown 0-1=50 (50 ns per byte, 20 MB/s): the pair 0-1's
   largest message takes at least bytes x 50 ns one way (nothing can make it faster), its
   bandwidth is 0.6-1.05x 20 MB/s (the real transport adds a little time; a loaded machine adds
   scheduling delays to every round trip: 0.73-0.98x measured at load average 15, 0.985x at 5),
   and the pairs 0-2 and 1-2 measure at least 5x more;
2. attn-check of a ring and a Ulysses plan (point-to-point and all-to-all traffic) with the link
   slowed passes the single-process reference check;
3. train runs the Ulysses plan with and without the slowed link to the same losses (the delayed
   transport moves the same bytes; for 2 ranks the rank-order sums equal MPI's); skipped, and
   said so, with --no-train (a build without the trainer, HEXISEQ_TRAIN=OFF, as scripts/sanitize
   makes).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

NS_PER_BYTE = 50
EXPECTED = 1e9 / NS_PER_BYTE  # bytes per second
LOW, HIGH = 0.60, 1.05
UNSLOWED_FACTOR = 5
CLUSTER = "nodes:\n  - {gpu: H100-SXM, count: 1, gpus_per_node: 2}\n"
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


def run(command):
    print("+", " ".join(command), flush=True)
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    if result.returncode != 0:
        sys.exit(f"link-check: FAIL: exit {result.returncode}\n{result.stdout}\n{result.stderr}")
    return result.stdout


def check_calibrate(args, tmp, failures):
    cluster = os.path.join(tmp, "slow-link.yaml")
    run(MPIRUN + ["-np", "3", args.bin, "calibrate", "--model", args.model, "--seq", "1536",
                  "--repeats", "1", "--link-slowdown", f"0-1={NS_PER_BYTE}", "-o", cluster])
    pairs = json.load(open(os.path.join(tmp, "slow-link.measurements.json")))["pairs"]
    rate = {tuple(pair["ranks"]): pair["bytes_per_second"] for pair in pairs}
    slow = next(pair for pair in pairs if tuple(pair["ranks"]) == (0, 1))
    wire = slow["message_bytes"][-1] * NS_PER_BYTE * 1e-9
    ok = slow["one_way_seconds"][-1] >= 0.99 * wire
    print(f"link-check: pair 0-1: {slow['message_bytes'][-1]} bytes one way in "
          f"{slow['one_way_seconds'][-1] * 1e3:.2f} ms (want >= {wire * 1e3:.2f} ms) "
          f"{'ok' if ok else 'MISS'}")
    if not ok:
        failures.append("slowed pair faster than its delay")
    slowed = rate[(0, 1)] / EXPECTED
    ok = LOW <= slowed <= HIGH
    print(f"link-check: pair 0-1: {rate[(0, 1)] / 1e6:.2f} MB/s = {slowed:.3f} x "
          f"{EXPECTED / 1e6:.0f} MB/s (want {LOW}..{HIGH}) {'ok' if ok else 'MISS'}")
    if not ok:
        failures.append("slowed pair bandwidth")
    for pair in ((0, 2), (1, 2)):
        ok = rate[pair] >= UNSLOWED_FACTOR * rate[(0, 1)]
        print(f"link-check: pair {pair[0]}-{pair[1]}: {rate[pair] / 1e6:.1f} MB/s (want >= "
              f"{UNSLOWED_FACTOR}x pair 0-1) {'ok' if ok else 'MISS'}")
        if not ok:
            failures.append(f"pair {pair} slowed")


def losses(output):
    return [json.loads(line)["loss"] for line in output.splitlines() if line.startswith("{")]


def check_runtime(args, tmp, failures):
    cluster = os.path.join(tmp, "two.yaml")
    open(cluster, "w").write(CLUSTER)
    link = ["--link-slowdown", f"0-1={NS_PER_BYTE}"]
    plans = {}
    for strategy in ("ring", "ulysses"):
        plans[strategy] = os.path.join(tmp, f"{strategy}.json")
        run([args.bin, "plan", "--cluster", cluster, "--model", args.model, "--seq", "512",
             "--strategy", strategy, "--format", "json", "-o", plans[strategy]])
        output = run(MPIRUN + ["-np", "2", args.bin, "attn-check", "--plan", plans[strategy],
                               "--head-dim", "32"] + link)
        ok = "result: PASS" in output
        print(f"link-check: attn-check {strategy} with the slowed link: "
              f"{'PASS' if ok else 'MISS'}")
        if not ok:
            failures.append(f"attn-check {strategy}")
    if args.no_train:
        print("link-check: train with the slowed link: skipped (this build has no trainer)")
        return
    train = MPIRUN + ["-np", "2", args.bin, "train", "--plan", plans["ulysses"], "--model",
                      args.model, "--steps", "2", "--format", "json"]
    plain, slowed = losses(run(train)), losses(run(train + link))
    ok = len(plain) == 2 and plain == slowed
    print(f"link-check: train losses {plain} without, {slowed} with the slowed link "
          f"{'ok' if ok else 'MISS'}")
    if not ok:
        failures.append("train losses")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--no-train", action="store_true", help="the binary has no train command")
    args = parser.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        check_calibrate(args, tmp, failures)
        check_runtime(args, tmp, failures)
    if failures:
        sys.exit("link-check: FAIL: " + ", ".join(failures))
    print("link-check: PASS")


if __name__ == "__main__":
    main()
