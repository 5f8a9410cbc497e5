"""The planning API from Python equals the hexiseq command's JSON on the example clusters, and
bad inputs raise hexiseq.Error subclasses carrying the command's message."""

import json

import pytest

import hexiseq
from conftest import cli_json, run_cli, source_path

CUSTOM4 = source_path("examples", "clusters", "custom-4.yaml")
H100_A100 = source_path("examples", "clusters", "h100-a100-16.yaml")
TINY = source_path("examples", "models", "tiny.yaml")
CASES = [(CUSTOM4, TINY, "4K"), (H100_A100, "llama3-8b", "128K")]
STRATEGIES = ["ring", "ulysses", "usp", "hetero-ring", "subset", "hexiseq"]


def workload_args(cluster, model, seq):
    return ["--cluster", cluster, "--model", model, "--seq", seq]


@pytest.mark.parametrize("cluster,model,seq", CASES)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_plan_equals_cli(cluster, model, seq, strategy):
    try:
        plan = hexiseq.plan(cluster, model, seq, strategy=strategy)
    except hexiseq.Error as error:  # not applicable or infeasible: the CLI says the same
        code, _, err = run_cli("plan", *workload_args(cluster, model, seq), "--strategy", strategy)
        assert code == 1 and err.strip() == f"hexiseq: {error}"
        return
    expected = cli_json("plan", *workload_args(cluster, model, seq), "--strategy", strategy)
    assert json.loads(plan.to_json()) == expected
    assert plan.predicted["iteration_seconds"] == expected["predicted"]["iteration_seconds"]


@pytest.mark.parametrize("cluster,model,seq", CASES)
def test_compare_equals_cli(cluster, model, seq):
    rows = hexiseq.compare(cluster, model, seq)
    assert rows == cli_json("compare", *workload_args(cluster, model, seq))["strategies"]
    assert {row["strategy"] for row in rows} >= {"ring", "usp", "hetero-ring", "hexiseq"}


@pytest.mark.parametrize("cluster,model,seq", CASES)
def test_simulate_and_validate_equal_cli(cluster, model, seq, tmp_path):
    plan = hexiseq.plan(cluster, model, seq, strategy="usp")
    path = tmp_path / "plan.json"
    plan.save(str(path))
    simulated = hexiseq.simulate(plan, cluster, model)
    assert simulated == cli_json("simulate", "--plan", str(path), "--cluster", cluster,
                                 "--model", model)
    predicted = hexiseq.validate(plan, cluster, model)
    assert predicted["iteration_seconds"] == plan.predicted["iteration_seconds"]
    assert run_cli("validate", "--plan", str(path), "--cluster", cluster, "--model", model)[0] == 0


def test_plan_json_round_trip_with_cli_files(tmp_path):
    path = tmp_path / "cli.json"
    code, _, err = run_cli("plan", *workload_args(CUSTOM4, TINY, "1021"), "--strategy", "hexiseq",
                           "--format", "json", "-o", str(path))
    assert code == 0, err
    from_cli = hexiseq.Plan.load(str(path))
    assert from_cli == hexiseq.plan(CUSTOM4, TINY, 1021)
    assert hexiseq.Plan.from_json(from_cli.to_json()) == from_cli
    assert from_cli.to_json() == path.read_text()


def test_plan_object_exposes_groups_members_and_predictions():
    plan = hexiseq.plan(CUSTOM4, TINY, 1021, strategy="usp")
    spec = hexiseq.model(TINY)
    assert plan.num_ranks == hexiseq.load_cluster(CUSTOM4).num_ranks == 4
    assert (plan.num_heads, plan.num_kv_heads) == (spec.heads, spec.kv_heads)
    assert plan.replica_sequences == [plan.batch] and plan.left_out == []
    assert all(group.replica == 0 for group in plan.groups)
    covered = sorted(r for g in plan.groups for r in g.tokens)
    assert sum(e - b for b, e in covered) == 1021
    for group in plan.groups:
        heads = sorted(h for m in group.members for h in m.heads)
        assert heads == list(range(spec.heads))
        assert sum(m.num_tokens for m in group.members) == sum(e - b for b, e in group.tokens)
    ranks = plan.predicted["ranks"]
    assert [r["rank"] for r in ranks] == list(range(4))
    assert all(0 < r["memory_bytes"] <= r["memory_capacity_bytes"] for r in ranks)
    assert plan.member(3).rank == 3


def cli_error(*args):
    code, _, err = run_cli(*args)
    assert code != 0
    assert err.startswith("hexiseq: ")
    return err.strip()[len("hexiseq: "):]


def test_bad_inputs_raise_with_the_cli_message(tmp_path):
    # The CLI rejects an unknown --strategy while parsing flags; the library names the choices.
    with pytest.raises(hexiseq.InvalidArgumentError, match=r'"best": unknown \(rule: one of hex'):
        hexiseq.plan(CUSTOM4, TINY, 1021, strategy="best")
    cases = [
        (hexiseq.IoError, lambda: hexiseq.load_cluster(str(tmp_path / "missing.yaml")),
         ("plan", *workload_args(str(tmp_path / "missing.yaml"), TINY, "1021"))),
        (hexiseq.InvalidArgumentError, lambda: hexiseq.model("llama9-1b"),
         ("plan", *workload_args(CUSTOM4, "llama9-1b", "1021"))),
        (hexiseq.InvalidArgumentError, lambda: hexiseq.plan(CUSTOM4, TINY, "12Q"),
         ("plan", *workload_args(CUSTOM4, TINY, "12Q"))),
    ]
    for error_class, call, cli_args in cases:
        with pytest.raises(error_class) as raised:
            call()
        # The Python argument is `seq` where the command's flag is `--seq`.
        assert str(raised.value) == cli_error(*cli_args).replace("--seq = ", "seq = ")
    with pytest.raises(hexiseq.Error):
        hexiseq.plan(CUSTOM4, TINY, 0)


def test_invalid_plan_raises_with_the_cli_message(tmp_path):
    plan = json.loads(hexiseq.plan(CUSTOM4, TINY, 1021, strategy="ring").to_json())
    member = plan["replicas"][0]["groups"][0]["members"][0]
    member["heads"] = member["heads"][1:]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(plan))
    broken = hexiseq.Plan.load(str(path))
    with pytest.raises(hexiseq.InvalidArgumentError) as raised:
        hexiseq.validate(broken, CUSTOM4, TINY)
    message = cli_error("validate", "--plan", str(path), "--cluster", CUSTOM4, "--model", TINY)
    assert message == f"{path}: {raised.value}"
    with pytest.raises(hexiseq.InvalidArgumentError, match="plan JSON"):
        hexiseq.Plan.from_json('{"format": "hexiseq.plan/1", "groups": 3}')
