"""The runtime's Comm over a torch.distributed gloo process group: MPI matching order, WaitAny
and Test on out-of-order completion, messages to self and empty messages, all-to-all-v (with zero
counts), all-reduce, all-gather, Split with a rank in no group, Dup with its own message space."""

import os

import pytest

pytest.importorskip("torch", reason="hexiseq.torch needs PyTorch (python3-torch)")

from conftest import launch  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "comm_worker.py")


@pytest.mark.parametrize("world", [1, 5])
def test_conformance(world):
    for rank, (code, out) in enumerate(launch(WORKER, world, [], 180)):
        assert code == 0 and f"rank {rank}: 0 failures" in out, out
