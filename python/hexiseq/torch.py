"""HexiSeq attention for PyTorch under torch.distributed (torchrun, torch.multiprocessing).

    ctx = hexiseq.torch.Context(plan)           # binds this rank to the plan (collective)
    x_local = ctx.shard(x, dim=0)               # this rank's tokens of a full sequence
    o = hexiseq.torch.attention(q, k, v, ctx)   # causal GQA attention, forward and backward
                                                # run the plan's distributed attention in C++

q is [local_tokens, heads, head_dim] and k, v are [local_tokens, kv_heads, head_dim] in token
layout: rank r holds the plan's tokens of r (ctx.positions, in that order). Communication goes
through the process group's send/recv (gloo; with an NCCL default group the Context makes a
gloo group over the same ranks, since the runtime computes on host memory). Tensors on a GPU
are moved to the host for the attention and the results moved back; any float dtype is computed
in fp32 and returned in the input's dtype.

A plan with several data-parallel replicas (or left-out ranks) runs each replica on its own: the
Context finds the calling rank's replica, makes a gloo subgroup of that replica's ranks (every
process of the default group must construct the Context: torch.distributed.new_group is
collective over it) and binds the rank to the replica as a plan of its own (ctx.replica_plan,
its ranks renumbered 0..n-1 in ascending order; ctx.rank is the rank inside the replica). The
attention then runs inside the replica only; combining the replicas' gradients (weighted by their
tokens) is the caller's, e.g. an all-reduce over ctx.participants_group. On a rank the plan leaves
out, the Context has left_out = True (and replica = -1) after taking part in the collective
set-up; shard, gather and attention then raise InvalidArgumentError.

Each attention call site needs the forward state until its backward, so a Context keeps a pool
of runtime attention objects: a forward takes the oldest free one (creating one, collectively,
when none is free) and its backward returns it; a forward without autograd returns it at once,
and a graph freed without backward returns it when freed. Every rank makes the same calls in the
same order, so the pools stay identical on all ranks. A second backward through the same graph
(retain_graph=True) is not supported and raises.
"""

import os

import torch
import torch.distributed as dist

from . import _core
from ._core import InvalidArgumentError, Plan

__all__ = ["Context", "attention"]


def _torch_ext():
    from . import _torch  # needs libtorch; imported after torch itself

    return _torch


class Context:
    """This process's place in a plan, over a torch.distributed process group.

    plan: a hexiseq.Plan or a path to a plan JSON file. group: the process group (default: the
    world group); its size must equal the plan's num_ranks. Collective over the group.
    """

    def __init__(self, plan, group=None):
        if not isinstance(plan, Plan):
            plan = Plan.load(os.fspath(plan))
        if not dist.is_available() or not dist.is_initialized():
            raise InvalidArgumentError(
                "hexiseq.torch.Context: torch.distributed is not initialized (hint: call "
                "torch.distributed.init_process_group('gloo') first, or launch with torchrun)")
        self.plan = plan
        self.group = group if group is not None else dist.group.WORLD
        gloo = self._gloo_group(self.group)
        self.replica, self.participants_group = 0, gloo
        self.replica_plan = plan
        self._comm_group = gloo
        self.left_out = False
        if len(plan.replica_sequences) > 1 or plan.left_out:
            self._bind_replica(gloo)
        if self.left_out:
            self.rank, self.world_size, self.heads = None, 0, []
            self.positions = torch.zeros(0, dtype=torch.long)
            return
        self._runtime = _torch_ext().Runtime(self.replica_plan.to_json(), self._comm_group)
        self.rank = self._runtime.rank
        self.world_size = self._runtime.size
        member = self.replica_plan.member(self.rank)
        self.heads = list(member.heads)
        self.positions = torch.cat(
            [torch.arange(begin, end, dtype=torch.long) for begin, end in member.tokens]
            or [torch.zeros(0, dtype=torch.long)])
        self._all_positions = None
        self._free = {}  # head_dim -> free runtime attention objects, oldest first
        self._created = {}  # head_dim -> how many were created
        # Seconds per phase of the last forward / backward in the C++ runtime on this rank
        # (alltoall, compute, ring_wait, total, ring_bytes_sent).
        self.last_forward_times = None
        self.last_backward_times = None

    def _bind_replica(self, gloo):
        """Collective over the default group: one gloo subgroup per replica and one of all
        participants; this rank keeps its replica's and binds to its replica's own plan."""
        plan_json = self.plan.to_json()
        _torch_ext().agree_on_plan(plan_json, gloo)  # the same plan everywhere before new_group
        replica_of, locals_ = _torch_ext().replicas(plan_json)
        group_ranks = (list(range(dist.get_world_size())) if self.group is dist.group.WORLD
                       else dist.get_process_group_ranks(self.group))
        plan_rank = dist.get_rank(self.group)
        participants = [group_ranks[rank] for rank in range(len(replica_of))
                        if replica_of[rank] >= 0]
        self.participants_group = dist.new_group(ranks=participants, backend="gloo")
        self.replica = replica_of[plan_rank]
        for replica, (local_json, plan_ranks) in enumerate(locals_):
            subgroup = dist.new_group(ranks=[group_ranks[rank] for rank in plan_ranks],
                                      backend="gloo")
            if replica == self.replica:
                self._comm_group = subgroup
                self.replica_plan = Plan.from_json(local_json)
        self.left_out = self.replica < 0

    @staticmethod
    def _gloo_group(group):
        if dist.get_backend(group) == dist.Backend.GLOO:
            return group
        ranks = None if group is dist.group.WORLD else dist.get_process_group_ranks(group)
        return dist.new_group(ranks=ranks, backend="gloo")

    def _check_not_left_out(self, what):
        if self.left_out:
            raise InvalidArgumentError(
                f"hexiseq.torch.{what}: rank {dist.get_rank(self.group)} is left out by the plan "
                f"(left_out = {list(self.plan.left_out)}): it holds no tokens and takes part in "
                "no attention (rule: only the ranks of a replica run it; hint: skip the model on "
                "this rank when ctx.left_out is true)")

    @property
    def num_tokens(self):
        return int(self.positions.numel())

    def shard(self, x, dim=0):
        """This rank's tokens (ctx.positions) of a full-sequence tensor, along `dim`."""
        self._check_not_left_out("Context.shard")
        if x.shape[dim] != self.plan.seq_len:
            raise InvalidArgumentError(
                f"shard: x.shape[{dim}] = {x.shape[dim]}: must be the plan's seq_len "
                f"{self.plan.seq_len}")
        return x.index_select(dim, self.positions.to(x.device))

    def gather(self, x, dim=0):
        """The full sequence from every rank's shard along `dim` (collective over the replica;
        no autograd)."""
        self._check_not_left_out("Context.gather")
        if x.shape[dim] != self.num_tokens:
            raise InvalidArgumentError(
                f"gather: x.shape[{dim}] = {x.shape[dim]}: must be this rank's "
                f"{self.num_tokens} tokens")
        positions = self._gather_positions()
        longest = max(int(p.numel()) for p in positions)
        moved = x.detach().movedim(dim, 0).contiguous().cpu()
        padded = torch.zeros((longest,) + tuple(moved.shape[1:]), dtype=moved.dtype)
        padded[: moved.shape[0]] = moved
        parts = [torch.empty_like(padded) for _ in positions]
        dist.all_gather(parts, padded, group=self._comm_group)
        full = torch.empty((self.plan.seq_len,) + tuple(moved.shape[1:]), dtype=moved.dtype)
        for rank_positions, part in zip(positions, parts):
            full[rank_positions] = part[: rank_positions.numel()]
        return full.movedim(0, dim).to(x.device)

    def _gather_positions(self):
        if self._all_positions is None:
            self._all_positions = []
            for rank in range(self.world_size):
                ranges = self.replica_plan.member(rank).tokens
                self._all_positions.append(torch.cat(
                    [torch.arange(b, e, dtype=torch.long) for b, e in ranges]
                    or [torch.zeros(0, dtype=torch.long)]))
        return self._all_positions

    def _acquire(self, head_dim):
        free = self._free.setdefault(head_dim, [])
        if free:
            return free.pop(0)
        self._created[head_dim] = self._created.get(head_dim, 0) + 1
        return (self._created[head_dim], self._runtime.create_attention(head_dim))

    def _release(self, head_dim, entry):
        free = self._free.setdefault(head_dim, [])
        free.append(entry)
        free.sort(key=lambda item: item[0])


class _Lease:
    """A pooled runtime attention object held from a forward until its backward (or until the
    graph is freed)."""

    def __init__(self, ctx, head_dim, entry):
        self.ctx, self.head_dim, self.entry = ctx, head_dim, entry

    @property
    def attention(self):
        if self.entry is None:
            raise InvalidArgumentError(
                "hexiseq.torch.attention: backward ran twice through the same forward "
                "(retain_graph=True); the forward state is gone (hint: run the forward again)")
        return self.entry[1]

    def release(self):
        if self.entry is not None:
            self.ctx._release(self.head_dim, self.entry)
            self.entry = None

    def __del__(self):
        self.release()


class _AttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(fctx, q, k, v, ctx, keep):
        head_dim = q.shape[2]
        lease = _Lease(ctx, head_dim, ctx._acquire(head_dim))
        dtype, device = q.dtype, q.device
        o, _ = lease.attention.forward(_host(q), _host(k), _host(v))
        ctx.last_forward_times = lease.attention.times(backward=False)
        if keep:
            fctx.lease = lease
            fctx.kv_dtype = (k.dtype, v.dtype)
        else:
            lease.release()
        return o.to(dtype=dtype, device=device)

    @staticmethod
    def backward(fctx, d_o):
        lease = fctx.lease
        dq, dk, dv = lease.attention.backward(_host(d_o))
        lease.ctx.last_backward_times = lease.attention.times(backward=True)
        lease.release()
        device = d_o.device
        return (dq.to(dtype=d_o.dtype, device=device),
                dk.to(dtype=fctx.kv_dtype[0], device=device),
                dv.to(dtype=fctx.kv_dtype[1], device=device), None, None)


def _host(x):
    return x.detach().to(device="cpu", dtype=torch.float32).contiguous()


def attention(q, k, v, ctx):
    """Causal GQA attention of this rank's tokens under the plan, softmax scale 1/sqrt(head_dim).

    q: [local_tokens, heads, head_dim]; k, v: [local_tokens, kv_heads, head_dim] (token layout,
    rows in ctx.positions order). Returns o like q. Collective over the Context's group: every
    rank calls it in the same order. Shapes are checked on every rank first; a mismatch raises
    hexiseq.InvalidArgumentError on every rank.
    """
    ctx._check_not_left_out("attention")
    ctx._runtime.check_inputs(list(q.shape), list(k.shape), list(v.shape))
    keep = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    return _AttentionFunction.apply(q, k, v, ctx, keep)
