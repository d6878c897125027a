#!/usr/bin/python3
"""The baseline for bench_engine_resnet20: the same ResNet-20 training step
(forward, summed cross-entropy, backward; batch 128 of random images) in
PyTorch (Debian's python3-torch, float32), at a given thread count.

    /usr/bin/python3 bench/pytorch_resnet20.py [--threads N] [--batch B] [--steps S]
                                               [--depth D] [--width W]

--depth and --width choose another CIFAR ResNet of the family (e.g. 56).

Prints "RESULT threads=N img_per_s=X" for bench/engine_vs_pytorch.sh, and the
peak resident memory of the process.
"""
import argparse
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
from make_fixtures import CifarResNet  # noqa: E402  (the reference model of the fixtures)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--width", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = CifarResNet(args.depth, args.width)
    model.train()
    images = torch.randn(args.batch, 3, 32, 32)
    labels = torch.randint(0, 10, (args.batch,))

    def step():
        model.zero_grad(set_to_none=False)
        F.cross_entropy(model(images), labels, reduction="sum").backward()

    step()  # warm-up
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = time.perf_counter() - t0
    rate = args.batch * args.steps / seconds
    if (args.depth, args.width) == (20, 16):
        print("pytorch %s threads %d: %.1f img/s, %.1f GFLOP/s" %
              (torch.__version__, args.threads, rate, rate * 0.2433))
    else:
        print("pytorch %s resnet%d-w%d threads %d: %.1f img/s" %
              (torch.__version__, args.depth, args.width, args.threads, rate))
    print("RESULT threads=%d img_per_s=%.2f" % (args.threads, rate))
    print("peak resident memory: %.1f MiB" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0))


if __name__ == "__main__":
    main()
