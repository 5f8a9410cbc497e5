"""hexiseq.torch.attention on 1-5 gloo processes against single-process PyTorch attention.

Output and q/k/v gradients must equal a float64 causal GQA attention on the gathered tensors
within 1e-5 relative, for ring, ulysses, usp, hetero-ring and hexiseq plans (planned for the
tiny model on the custom-4 cluster) and hand-written plans with zero-token ranks, ranks without
heads and idle ranks, for Contexts on two subgroups of one world, and for plans with two
replicas (each runs on its own ranks) or a left-out rank (its Context refuses attention). Bad inputs (plan/world-size
mismatch, heads that do not match the plan, different plans on different ranks) must raise a
clear error on every rank without hanging.
"""

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="hexiseq.torch needs PyTorch (python3-torch)")
import hexiseq  # noqa: E402

from conftest import launch, source_path  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "attention_worker.py")
PLANS = source_path("tests", "mpi", "plans")
TIMEOUT = 240


def hand_plan(name):
    return os.path.join(PLANS, name + ".json")


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """Plans from the planner for the tiny model on custom-4 at an odd sequence length."""
    folder = tmp_path_factory.mktemp("plans")
    paths = []
    for strategy in ("ring", "ulysses", "usp", "hetero-ring", "hexiseq"):
        plan = hexiseq.plan(source_path("examples", "clusters", "custom-4.yaml"),
                            source_path("examples", "models", "tiny.yaml"), 1021,
                            strategy=strategy)
        path = folder / f"{strategy}.json"
        plan.save(str(path))
        paths.append(str(path))
    return paths


def run_and_check(world, plans, expected_results):
    results = launch(WORKER, world, ["--plans", *plans], TIMEOUT)
    for rank, (code, out) in enumerate(results):
        assert code == 0, f"rank {rank} failed:\n{out}"
    # One line per replica of each plan, from the replica's first rank (rank 0 may be left out).
    lines = [json.loads(line) for _, out in results for line in out.splitlines()
             if line.startswith("{") and "errors" in line]
    assert len(lines) == expected_results, results
    for line in lines:
        assert line["pass"], line
        plan = hexiseq.Plan.load(plans[line["index"]])
        assert len(plan.replica_sequences) == 1
        assert line["ranks"] == world - len(plan.left_out), line


@pytest.mark.parametrize("world,plan", [(1, "single1"), (2, "ulysses2_zero_tokens"),
                                        (3, "hetero3"), (5, "hetero5_idle")])
def test_hand_written_plans(world, plan):
    run_and_check(world, [hand_plan(plan)], 1)


def test_four_processes_baselines_and_hexiseq(planned):
    plans = [hand_plan(name) for name in ("ring4_zigzag", "ulysses4_gqa", "usp2x2")] + planned
    run_and_check(4, plans, len(plans))


def test_contexts_on_subgroups():
    """Two 2-rank groups of a 4-rank world, each with its own Context and plan."""
    results = launch(WORKER, 4, ["--plans", hand_plan("ulysses2_zero_tokens"), "--subgroups",
                                 "2"], TIMEOUT)
    for rank, (code, out) in enumerate(results):
        assert code == 0, f"rank {rank} failed:\n{out}"
    for rank in (0, 2):  # the first rank of each group reports its group's check
        line = json.loads(next(l for l in results[rank][1].splitlines() if l.startswith("{")))
        assert line["pass"] and line["ranks"] == 2, line


def report_lines(results):
    """rank -> its JSON line, for the ranks that printed one."""
    lines = {}
    for rank, (code, out) in enumerate(results):
        assert code == 0, f"rank {rank} failed:\n{out}"
        for line in out.splitlines():
            if line.startswith("{"):
                lines[rank] = json.loads(line)
    return lines


def test_replica_plan_runs_each_replica_on_its_own_ranks():
    """replicas2_tiny: ranks 0-2 (a CP x HP layout) are replica 0, rank 3 alone is replica 1;
    each replica's first rank checks its replica's attention against the reference."""
    lines = report_lines(launch(WORKER, 4, ["--plans", hand_plan("replicas2_tiny")], TIMEOUT))
    assert sorted(lines) == [0, 3], lines
    assert lines[0]["replica"] == 0 and lines[0]["ranks"] == 3 and lines[0]["pass"], lines[0]
    assert lines[3]["replica"] == 1 and lines[3]["ranks"] == 1 and lines[3]["pass"], lines[3]


def test_left_out_rank_gets_a_context_that_refuses_attention():
    lines = report_lines(launch(WORKER, 4, ["--plans", hand_plan("left_out3_tiny")], TIMEOUT))
    assert sorted(lines) == [0, 3], lines
    assert lines[0]["ranks"] == 3 and lines[0]["pass"], lines[0]
    assert lines[3]["left_out"] and lines[3]["replica"] == -1, lines[3]
    assert ("hexiseq.torch.attention: rank 3 is left out by the plan (left_out = [3]): it holds "
            "no tokens") in lines[3]["raised"], lines[3]


def errors_of(results):
    return [next((l for l in out.splitlines() if l.startswith("ERROR")), out)
            for _, out in results]


def test_world_size_mismatch_raises_on_every_rank():
    results = launch(WORKER, 3, ["--plans", hand_plan("usp2x2")], TIMEOUT)
    for code, line in zip((c for c, _ in results), errors_of(results)):
        assert code == 1
        assert line.startswith("ERROR InvalidArgumentError: "), line
        assert "plan: num_ranks = 4 but the process group has 3 ranks" in line, line


def test_heads_mismatch_raises_on_every_rank():
    results = launch(WORKER, 2, ["--plans", hand_plan("ulysses2_zero_tokens"),
                                 "--heads-override", "3"], TIMEOUT)
    for code, line in zip((c for c, _ in results), errors_of(results)):
        assert code == 1
        assert "ERROR InvalidArgumentError: rank 0: q [" in line, line
        assert "query heads" in line and "rank 1: q [" in line, line


def test_different_plans_raise_on_every_rank():
    results = launch(WORKER, 4, ["--plans", hand_plan("usp2x2"), "--plan-for-last-rank",
                                 hand_plan("usp2x2_swapped")], TIMEOUT)
    for code, line in zip((c for c, _ in results), errors_of(results)):
        assert code == 1
        assert "plan mismatch across ranks: " in line, line
        assert "ranks 0, 1, 2 loaded plan hash" in line and "rank 3 loaded plan hash" in line, line
