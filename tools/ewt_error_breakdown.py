"""Where the tagging recipe errs on UD English-EWT's test set, beside the feature-based tagger: one run of the recipe
(`examples/downstream_benchmark.py`, the `all` row, all of EWT's training sentences), then its errors and the
feature tagger's split by

- sentences with a split clitic ("do n't", "John 's", "we 'll": EWT's tokens, which the default biLM's training
  text never splits) against the rest;
- words seen in EWT's training sentences against unseen ones;
- the most frequent (gold, predicted) confusions.

    python tools/ewt_error_breakdown.py --model elmo_hf/pretrained/elmo-english-small --seed 0 \
        --output benchmarks/results/NAME.json

About 12 minutes on one thread. Prints the JSON it writes.
"""

import argparse
import json
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import downstream_benchmark  # noqa: E402

from elmo_hf import ElmoModel, ElmoTokenizer  # noqa: E402

CLITICS = {"n't", "nt", "'s", "s", "'re", "'ll", "'ve", "'m", "'d", "ca", "wo"}


class KeptEpochPredictions(downstream_benchmark.BestEpochOnDev):
    """The recipe's choice of epoch (best on dev), also keeping that epoch's test predictions (one tag id per word)."""

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        kept = self.best
        super().on_epoch_end(args, state, control, model=model, **kwargs)
        if self.best is kept:
            return
        self.best["test_predictions"] = [
            row[gold != -100].tolist()
            for guesses, labels in downstream_benchmark.batch_predictions(model, self.datasets["test"], self.batch_size)
            for row, gold in zip(guesses, labels)
        ]
        model.train()


def error_breakdown(splits, names, recipe_predictions, feature_predictions):
    """Token counts and errors of both taggers, by group, and the top confusions of each."""
    seen = Counter(word for words, _ in splits["train"] for word in words)
    groups, confusions = {}, {"recipe": Counter(), "feature_tagger": Counter()}
    for (words, tags), recipe, feature in zip(splits["test"], recipe_predictions, feature_predictions):
        sentence_group = "sentences with a clitic" if any(w.lower() in CLITICS for w in words) else "other sentences"
        for word, gold, recipe_id, feature_tag in zip(words, tags, recipe, feature):
            recipe_tag = names[recipe_id]
            for group in (sentence_group, "seen words" if seen[word] else "unseen words"):
                counts = groups.setdefault(group, {"words": 0, "recipe_errors": 0, "feature_tagger_errors": 0})
                counts["words"] += 1
                counts["recipe_errors"] += recipe_tag != gold
                counts["feature_tagger_errors"] += feature_tag != gold
            if recipe_tag != gold:
                confusions["recipe"][f"{gold} -> {recipe_tag}"] += 1
            if feature_tag != gold:
                confusions["feature_tagger"][f"{gold} -> {feature_tag}"] += 1
    for counts in groups.values():
        for tagger in ("recipe", "feature_tagger"):
            counts[f"{tagger}_error_rate"] = round(counts[f"{tagger}_errors"] / counts["words"], 5)
        baseline_errors = counts["feature_tagger_errors"]
        counts["recipe_error_reduction"] = (
            round(1 - counts["recipe_errors"] / baseline_errors, 4) if baseline_errors else None
        )
    return groups, {tagger: dict(counter.most_common(12)) for tagger, counter in confusions.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="elmo_hf/pretrained/elmo-english-small")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default="outputs/downstream-data")
    parser.add_argument(
        "--task-word-dropout",
        type=float,
        default=downstream_benchmark.RECIPE["pos"]["task_word_dropout"],
        help="as downstream_benchmark.py's --pos-task-word-dropout",
    )
    parser.add_argument("--output", help="write the JSON here too")
    args = parser.parse_args(argv)
    # the recipe's settings: downstream_benchmark.py's own defaults (its output folder is not used)
    settings = downstream_benchmark.parse_arguments(
        [
            *("--model", args.model, "--output-dir", os.devnull, "--data-dir", args.data_dir, "--tasks", "pos"),
            *("--pos-task-word-dropout", str(args.task_word_dropout)),
        ]
    )
    model, tokenizer = ElmoModel.from_pretrained(args.model).eval(), ElmoTokenizer.from_pretrained(args.model)
    datasets, _, _, names, _, _, train_words, splits = downstream_benchmark.prepare_task(
        settings, "pos", model, tokenizer, with_baseline=False
    )
    feature_tagger = downstream_benchmark.fit_feature_tagger(splits["train"])  # fitted once: scores and breakdown
    baseline = downstream_benchmark.feature_tagger_accuracy(splits, feature_tagger)
    task_words = downstream_benchmark.add_pretrained_words(
        downstream_benchmark.build_task_word_vocab(train_words, settings.task_word_min_count),
        downstream_benchmark.pretrained_word_list(bilm_path=args.model),
    )
    kept = downstream_benchmark.train_head(
        settings, "pos", "all", args.seed, model.config, datasets, len(names), task_words, KeptEpochPredictions
    )
    feature_predictions = feature_tagger([w for w, _ in splits["test"]])
    groups, confusions = error_breakdown(splits, names, kept.pop("test_predictions"), feature_predictions)
    result = {
        "model": args.model,
        "seed": args.seed,
        "task_word_dropout": args.task_word_dropout,
        "recipe": kept,
        "feature_tagger": baseline,
        "groups": groups,
        "confusions": confusions,
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
