"""examples/python/train_llama.py: the loss over 10 steps on 4 processes (torch.distributed.run,
a hetero-ring plan over custom-4, so every rank holds tokens) equals the same script on 1 process
within 1e-4."""

import json
import os
import subprocess

import pytest

pytest.importorskip("torch", reason="hexiseq.torch needs PyTorch (python3-torch)")

from conftest import PYTHON, free_port, source_path  # noqa: E402

SCRIPT = source_path("examples", "python", "train_llama.py")
STEPS = 10
TIMEOUT = 400

SINGLE_RANK_CLUSTER = """name: one-h100
nodes:
  - gpu: H100-SXM
    count: 1
    gpus_per_node: 1
"""


def train(world, cluster, strategy, losses_path):
    # --redirects 1 --tee 1: torch 1.13's torchrun cannot parse its default "0" under Python 3.11.
    command = [PYTHON, "-m", "torch.distributed.run", "--nproc_per_node", str(world),
               "--redirects", "1", "--tee", "1", "--master_addr", "127.0.0.1", "--master_port",
               str(free_port()), SCRIPT, "--cluster", cluster, "--strategy", strategy, "--seq",
               "512", "--steps", str(STEPS), "--losses", str(losses_path)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tokens/s" in done.stdout
    return json.loads(losses_path.read_text())


def test_four_processes_match_one(tmp_path):
    single = tmp_path / "one.yaml"
    single.write_text(SINGLE_RANK_CLUSTER)
    one = train(1, str(single), "hexiseq", tmp_path / "one.json")
    four = train(4, source_path("examples", "clusters", "custom-4.yaml"), "hetero-ring",
                 tmp_path / "four.json")
    assert (one["world_size"], four["world_size"]) == (1, 4)
    assert len(one["losses"]) == len(four["losses"]) == STEPS
    assert four["losses"][-1] < four["losses"][0]  # it trains
    for step, (a, b) in enumerate(zip(one["losses"], four["losses"])):
        assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), f"step {step}: {a} vs {b}"
