"""One rank of the Comm conformance check over a gloo process group (started by test_comm.py):
prints "FAIL <line>" for each failed expectation and exits 1 when there is any."""

import argparse
import sys

import torch.distributed as dist

from hexiseq import _torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--init", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    args = p.parse_args()
    dist.init_process_group("gloo", init_method=args.init, rank=args.rank, world_size=args.world)
    failures = _torch._comm_conformance(dist.group.WORLD)
    for line in failures:
        print("FAIL", line, flush=True)
    print(f"rank {args.rank}: {len(failures)} failures", flush=True)
    dist.destroy_process_group()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
