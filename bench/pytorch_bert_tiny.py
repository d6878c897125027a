#!/usr/bin/python3
"""PyTorch baseline for bench/engine_bert_tiny.cc: the same bert-tiny MLM step.

32 x 128 tokens, vocabulary 30,522, 19 masked per sequence, dropout 0.1, head
on the masked positions only, AdamW; float32. Run with OPENBLAS_NUM_THREADS=1
(bench/bert_vs_pytorch.sh does) so PyTorch's threads and BLAS's never nest.
Prints one line per thread count: "threads N: X tok/s", and the peak
resident memory.

    pytorch_bert_tiny.py [--batch N] [--no-optimizer] [--threads T] [STEPS]
                         [LAYERS HIDDEN HEADS INTERMEDIATE]

Four sizes after the steps: another member of the family (4 256 4 1024:
BERT-mini). --batch: sequences per step (32). --no-optimizer: forward and
backward only, as the engine's train_micro_batch (bench/engine_micro_batch.cc).
--threads: that thread count only (default 1 and 2).
"""
import argparse
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures"))
from make_bert_fixture import TINY, BertTiny, Sizes  # noqa: E402

BATCH, SEQ, VOCAB, MASKED = 32, 128, 30522, 19


def make_batch(gen):
    tokens = torch.randint(1000, VOCAB, (BATCH, SEQ), generator=gen)
    tokens[:, 0], tokens[:, -1] = 101, 102
    labels = torch.full((BATCH, SEQ), -100, dtype=torch.long)
    for s in range(BATCH):
        spots = torch.randperm(SEQ - 2, generator=gen)[:MASKED] + 1
        labels[s, spots] = tokens[s, spots]
        tokens[s, spots] = 103
    types = torch.zeros(BATCH, SEQ, dtype=torch.long)
    attention = torch.ones(BATCH, SEQ)
    return tokens, types, attention, labels


def tokens_per_second(threads, steps, sizes, optimizer=True):
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = BertTiny(VOCAB, SEQ, dropout=0.1, s=sizes)
    for name, p in model.named_parameters():  # BERT's initialisation
        with torch.no_grad():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
            elif name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.zero_()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    batch = make_batch(torch.Generator().manual_seed(2024))

    def step():
        opt.zero_grad()
        _, loss_sum = model(*batch)
        (loss_sum / (BATCH * MASKED)).backward()
        if optimizer:
            opt.step()

    step()  # warm-up
    best = float("inf")
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    return BATCH * SEQ / best


def main():
    global BATCH
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("steps", type=int, nargs="?", default=5, help="timed steps (5)")
    parser.add_argument("sizes", type=int, nargs="*",
                        help="LAYERS HIDDEN HEADS INTERMEDIATE (default: bert-tiny)")
    parser.add_argument("--batch", type=int, default=BATCH, help="sequences per step (32)")
    parser.add_argument("--no-optimizer", action="store_true",
                        help="forward and backward only, no AdamW step")
    parser.add_argument("--threads", type=int, help="this thread count only (default 1 and 2)")
    args = parser.parse_args()
    if args.sizes and len(args.sizes) != 4:
        parser.error("give four sizes: LAYERS HIDDEN HEADS INTERMEDIATE")
    BATCH = args.batch
    optimizer = not args.no_optimizer
    thread_counts = (args.threads,) if args.threads else (1, 2)
    steps = args.steps
    sizes = Sizes(*args.sizes) if args.sizes else TINY
    name = "bert-tiny" if sizes is TINY else \
        f"bert-L{sizes.layers}-H{sizes.hidden}-A{sizes.heads}"
    print(f"PyTorch {torch.__version__} {name} MLM training, {BATCH} x {SEQ}, vocab {VOCAB}, "
          f"{MASKED} masked per sequence, dropout 0.1, "
          f"{'AdamW' if optimizer else 'no optimizer step'}; best of {steps} steps")
    for threads in thread_counts:
        rate = tokens_per_second(threads, steps, sizes, optimizer)
        print(f"threads {threads}: {rate:8.0f} tok/s", flush=True)
    print("peak resident memory: %.1f MiB" %
          (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0))


if __name__ == "__main__":
    main()
