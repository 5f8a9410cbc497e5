"""hexiseq.torch on one process (gloo world of 1): Context, shard/gather, the pool of runtime
attention objects, dtypes, and every bad input's error. Multi-process checks are in
test_attention.py."""

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="hexiseq.torch needs PyTorch (python3-torch)")
import torch.distributed as dist  # noqa: E402

import hexiseq  # noqa: E402
import hexiseq.torch as hxt  # noqa: E402
from conftest import source_path  # noqa: E402

PLANS = source_path("tests", "mpi", "plans")
SINGLE = os.path.join(PLANS, "single1.json")  # 257 tokens, 4 heads, 1 KV head
HEAD_DIM = 8


def test_context_before_init_process_group_raises():
    assert not dist.is_initialized()
    with pytest.raises(hexiseq.InvalidArgumentError, match="torch.distributed is not initialized"):
        hxt.Context(SINGLE)


@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield hxt.Context(SINGLE)
    dist.destroy_process_group()


def qkv(ctx, requires_grad=True, dtype=torch.float32, tokens=None):
    generator = torch.Generator().manual_seed(5)
    n = ctx.num_tokens if tokens is None else tokens
    shapes = [(n, 4, HEAD_DIM), (n, 1, HEAD_DIM), (n, 1, HEAD_DIM)]
    return [torch.randn(s, generator=generator).to(dtype).requires_grad_(requires_grad)
            for s in shapes]


def test_positions_shard_and_gather(ctx):
    assert ctx.positions.tolist() == list(range(257))
    x = torch.arange(257 * 3, dtype=torch.float32).view(257, 3)
    assert torch.equal(ctx.gather(ctx.shard(x, dim=0), dim=0), x)
    assert torch.equal(ctx.gather(ctx.shard(x.t(), dim=1), dim=1), x.t())


def test_shard_and_gather_reject_wrong_lengths(ctx):
    with pytest.raises(hexiseq.InvalidArgumentError, match=r"x.shape\[0\] = 256: must be .* 257"):
        ctx.shard(torch.zeros(256, 2))
    with pytest.raises(hexiseq.InvalidArgumentError, match=r"this rank's 257 tokens"):
        ctx.gather(torch.zeros(3, 2))


def test_pool_reuses_runtime_attention_objects(ctx):
    with torch.no_grad():
        for _ in range(3):
            hxt.attention(*qkv(ctx, requires_grad=False), ctx)
    assert ctx._created[HEAD_DIM] == 1  # a forward without autograd returns its object at once
    first, second = (hxt.attention(*qkv(ctx), ctx) for _ in range(2))
    assert ctx._created[HEAD_DIM] == 2  # two forwards waiting for their backward
    (first.sum() + second.sum()).backward()
    assert len(ctx._free[HEAD_DIM]) == 2
    hxt.attention(*qkv(ctx), ctx)  # graph dropped without backward: the object comes back
    assert len(ctx._free[HEAD_DIM]) == 2 and ctx._created[HEAD_DIM] == 2


def test_second_backward_through_one_forward_raises(ctx):
    o = hxt.attention(*qkv(ctx), ctx)
    o.sum().backward(retain_graph=True)
    with pytest.raises(hexiseq.InvalidArgumentError, match="backward ran twice"):
        o.sum().backward()


def test_other_dtypes_compute_in_fp32_and_keep_their_dtype(ctx):
    q, k, v = qkv(ctx, dtype=torch.bfloat16)
    o = hxt.attention(q, k, v, ctx)
    o.float().sum().backward()
    assert o.dtype == q.grad.dtype == k.grad.dtype == torch.bfloat16
    expected = hxt.attention(*[t.detach().float() for t in (q, k, v)], ctx)
    assert torch.allclose(o.float(), expected, atol=1e-2)


@pytest.mark.parametrize("change,message", [
    (lambda q, k, v: (q[None], k, v), r"must be 3-D \[local_tokens, heads, head_dim\]"),
    (lambda q, k, v: (q[:, :3], k, v), r"the plan has 4 query heads and 1 KV heads"),
    (lambda q, k, v: (q[:200], k[:200], v[:200]), r"this rank holds 257 tokens in the plan"),
    (lambda q, k, v: (q, k[..., :4], v), r"same head_dim"),
])
def test_bad_shapes_raise(ctx, change, message):
    with pytest.raises(hexiseq.InvalidArgumentError, match="rank 0: .*" + message):
        hxt.attention(*change(*qkv(ctx, requires_grad=False)), ctx)


def test_plan_for_another_world_size_raises(ctx):
    with pytest.raises(hexiseq.InvalidArgumentError,
                       match="num_ranks = 4 but the process group has 1 ranks"):
        hxt.Context(os.path.join(PLANS, "usp2x2.json"))


def test_plan_that_breaks_an_invariant_raises(ctx, tmp_path):
    broken = json.loads(open(SINGLE).read())
    broken["seq_len"] = 300  # the groups' tokens no longer cover [0, seq_len)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(hexiseq.InvalidArgumentError, match="300"):
        hxt.Context(str(path))
