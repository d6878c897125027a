#!/usr/bin/python3
"""The baseline for bench_exchange_allreduce: torch.distributed's allreduce
over gloo (Debian's python3-torch), W processes on this host, float32 sum of
the same number of bytes, timed the same way: an iteration takes as long as
its slowest rank; the median is over iterations.

    /usr/bin/python3 bench/gloo_allreduce.py --world 4 --bytes 18350080 [--iters 30] [--warmup 5]

Prints "RESULT algorithm=gloo world=W bytes=B iters=K median_ms=X mean_ms=Y
min_ms=Z" for bench/exchange_vs_gloo.sh. Every rank checks every result
against the exact sum (the same contributions as the C++ bench) and the run
fails if one differs.
"""
import argparse
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def contribution(rank, n):
    i = torch.arange(n, dtype=torch.int64)
    return ((i * 7 + rank * 13) % 1000).to(torch.float32) * 0.25


def run(rank, world, port, n, iters, warmup, out):
    # One thread per process, as each of our ranks computes on one thread:
    # W processes already share this host's cores.
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    mine = contribution(rank, n)
    expected = sum(contribution(r, n).to(torch.float64) for r in range(world)).to(torch.float32)
    buffer = torch.empty(n, dtype=torch.float32)
    times = []
    for it in range(warmup + iters):
        buffer.copy_(mine)  # all_reduce works in place
        start = time.perf_counter()
        dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
        seconds = time.perf_counter() - start
        if not torch.equal(buffer, expected):
            raise SystemExit(f"gloo_allreduce: rank {rank} iteration {it}: wrong sum")
        if it >= warmup:
            times.append(seconds)
    gathered = [None] * world
    dist.all_gather_object(gathered, times)
    if rank == 0:
        out.put(gathered)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--bytes", type=int, default=18350080)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    if args.bytes % 4:
        sys.exit(f"gloo_allreduce: --bytes {args.bytes} is not a multiple of 4")
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.spawn(run, args=(args.world, port, args.bytes // 4, args.iters, args.warmup, out),
             nprocs=args.world, join=True)
    per_rank = out.get()
    slowest = [max(t[i] for t in per_rank) for i in range(args.iters)]
    print(f"RESULT algorithm=gloo world={args.world} bytes={args.bytes} iters={args.iters} "
          f"median_ms={1e3 * statistics.median(slowest):.3f} "
          f"mean_ms={1e3 * statistics.mean(slowest):.3f} min_ms={1e3 * min(slowest):.3f}")


if __name__ == "__main__":
    main()
