#!/usr/bin/python3
"""bench/measured/run's figures without training: the per-round medians and speedups of
synthetic timed steps, the one-decimal shares, and the ideal line (`hexiseq compare`'s bound,
which no plan of the same cluster may beat). Prints "measured-bench-table: PASS" when every
check holds."""
import argparse
import importlib.machinery
import json
import os
import subprocess
import sys
import tempfile
import types

sys.dont_write_bytecode = True  # loading bench/measured/run must not write into the tree
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEQ = 2048
CLUSTER = os.path.join(ROOT, "examples", "clusters", "cpu-4.yaml")


def fail(message):
    sys.exit(f"measured-bench-table: FAIL: {message}")


def check(condition, message):
    if not condition:
        fail(message)


def steps(seconds_per_round):
    """Timed steps of one plan on one rank: each round's three step times."""
    return [{"seconds": seconds, "linear_seconds": seconds / 2,
             "attention_compute_seconds": seconds / 4,
             "ranks": [{"rank": 0, "compute_seconds": seconds, "attention_comm_seconds": 0.0,
                        "grad_sync_seconds": 0.0}]}
            for round_seconds in seconds_per_round for seconds in round_seconds]


def check_rounds(bench):
    ring = bench.summarize(steps([(1.0, 1.2, 1.1), (2.0, 2.2, 2.1), (1.5, 1.4, 1.6)]), 3)
    check(ring["round_medians"] == [1.1, 2.1, 1.5], f"round medians {ring['round_medians']}")
    check(ring["measured"] == 1.5, f"median over all rounds {ring['measured']}")
    hexiseq = bench.summarize(steps([(0.5,) * 3, (1.0,) * 3, (0.75,) * 3]), 3)
    rows = {"ring": ring, "hetero-ring": hexiseq, "hexiseq": hexiseq}
    speedups = bench.round_speedups(rows, "ring")
    check([round(value, 6) for value in speedups["over_uniform"]] == [2.2, 2.1, 2.0],
          f"round speedups over ring {speedups['over_uniform']}")
    check(speedups["over_hetero_ring"] == [1.0, 1.0, 1.0],
          f"round speedups over hetero-ring {speedups['over_hetero_ring']}")
    check(bench.gain(1.5, 2.0) == "50.0% of the predicted gain, 75.0% of the predicted speedup",
          f"gain {bench.gain(1.5, 2.0)}")
    check(bench.gain(1.1, 0.99) == "n/a (no gain predicted)", "no gain predicted")


def check_ideal(bench, work):
    """The ideal is below the step time of every plan the planner makes on the same cluster."""
    model = os.path.join(ROOT, "bench", "measured", "gqa.yaml")
    args = types.SimpleNamespace(seq=SEQ)
    ideal = bench.ideal_seconds(CLUSTER, model, args)
    check(ideal > 0, f"ideal {ideal}")
    for strategy in ("ring", "hexiseq"):
        plan = os.path.join(work, f"{strategy}.json")
        subprocess.run([bench.BIN, "plan", "--cluster", CLUSTER, "--model", model] +
                       bench.workload_flags(args) +
                       ["--strategy", strategy, "--format", "json", "-o", plan], check=True,
                       capture_output=True)
        predicted = json.load(open(plan))["predicted"]["iteration_seconds"]
        check(ideal <= predicted * (1 + 1e-9),
              f"ideal {ideal:.4f} s above {strategy}'s predicted {predicted:.4f} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin", required=True, help="the hexiseq executable")
    args = parser.parse_args()
    bench = importlib.machinery.SourceFileLoader(
        "measured_bench", os.path.join(ROOT, "bench", "measured", "run")).load_module()
    bench.BIN = args.bin
    check_rounds(bench)
    with tempfile.TemporaryDirectory() as work:
        check_ideal(bench, work)
    print("measured-bench-table: PASS")


if __name__ == "__main__":
    main()
