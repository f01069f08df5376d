"""Which batch each logged step of a length-grouped training run held: its place in the sorted group of batches and
its tokens, beside the gradient norm the run's log gave for that step.

`run_bilm_pretraining.py --train_sampling_strategy group_by_length` draws an epoch as groups of (at most) 50
batches, each group sorted by sentence length (`ElmoLengthGroupedSampler`, seeded with seed + epoch). The `Trainer`
logged the gradient norm of the last update before each log, so with `--logging_steps 50` every logged update sat at
the same place in its group for a whole epoch, a place that moved at each epoch boundary (an epoch is rarely a multiple
of 50 steps). The script now logs the mean over the updates since the last log instead.

    python tools/logged_step_batches.py outputs/gpu-mix/train.txt --batch-size 512 --seed 0 --epochs 3 \
        --log benchmarks/results/2026-11-28-gpu-english-h200-full-softmax-continuation.log

prints one line per logged step: step, epoch, place in its group (0 = longest sentences), tokens of that batch
(words and `</S>`, sentences cut at `--max-words`), and the logged norm.
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from run_bilm_pretraining import ElmoLengthGroupedSampler, ElmoLineDataset  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("train_file")
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--logging-steps", type=int, default=50)
    parser.add_argument("--max-words", type=int, default=80)
    parser.add_argument("--log", help="the run's console log: its logged grad_norm values go beside the steps")
    args = parser.parse_args(argv)
    lengths = [min(int(count), args.max_words) for count in ElmoLineDataset(args.train_file).word_counts]
    norms = []
    if args.log:
        with open(args.log, encoding="utf-8") as log:
            norms = [float(value) for value in re.findall(r"[\"']grad_norm[\"']: [\"']?([0-9.e-]+)", log.read())]
    sampler = ElmoLengthGroupedSampler(args.batch_size, lengths, args.seed)
    steps_per_epoch = -(-len(lengths) // args.batch_size)
    group = min(len(lengths) // (4 * args.batch_size), 50) or 1  # batches per sorted group, as transformers sizes it
    logged = 0
    print("step epoch place tokens logged_grad_norm")
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        order = list(sampler)
        for batch in range(steps_per_epoch):
            step = epoch * steps_per_epoch + batch + 1
            if step % args.logging_steps:
                continue
            indices = order[batch * args.batch_size : (batch + 1) * args.batch_size]
            tokens = sum(lengths[index] + 1 for index in indices)
            norm = norms[logged] if logged < len(norms) else ""
            print(step, epoch, batch % group, tokens, norm)
            logged += 1


if __name__ == "__main__":
    main()
