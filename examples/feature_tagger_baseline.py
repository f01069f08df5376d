#!/usr/bin/env python
"""The scikit-learn baseline to print beside a tagger's scores: a logistic-regression tagger (C=1) on each word's
features (the word, its affixes and shape, its neighbours: `downstream_benchmark.word_features`), trained and scored
on the CoNLL files that `run_token_classification.py` reads. Prints token accuracy and, for IOB tags, entity
precision, recall and F1 (seqeval, CoNLL style), as one JSON object.

    python examples/feature_tagger_baseline.py --train_file train.conll --test_file test.conll
"""

import argparse
import json

from downstream_benchmark import fit_feature_tagger
from run_token_classification import read_conll

from elmo_hf.user_errors import reported_as_one_line


def tagger_baseline(train_sentences, test_sentences):
    """Scores of the feature tagger trained on `train_sentences`, run on `test_sentences` (lists of (words, tags))."""
    predicted_tags = fit_feature_tagger(train_sentences)([words for words, _ in test_sentences])
    gold_tags = [list(tags) for _, tags in test_sentences]
    pairs = [
        (gold, guess)
        for gold_row, guess_row in zip(gold_tags, predicted_tags)
        for gold, guess in zip(gold_row, guess_row)
    ]
    scores = {"token_accuracy": sum(gold == guess for gold, guess in pairs) / len(pairs)}
    if all(tag == "O" or tag[:2] in ("B-", "I-") for row in gold_tags for tag in row):
        from seqeval.metrics import f1_score, precision_score, recall_score

        for name, metric in (("precision", precision_score), ("recall", recall_score), ("f1", f1_score)):
            scores[f"entity_{name}"] = float(metric(gold_tags, predicted_tags))
    return scores


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train_file", required=True, help="CoNLL file: a word and its tag per line")
    parser.add_argument("--test_file", required=True, help="CoNLL file scored by the trained tagger")
    args = parser.parse_args(argv)
    splits = {
        name: [(row["tokens"], row["ner_tags"]) for row in read_conll(path)]
        for name, path in (("train", args.train_file), ("test", args.test_file))
    }
    scores = tagger_baseline(splits["train"], splits["test"])
    print(json.dumps({"baseline": "feature-based logistic-regression tagger", **scores}))
    return scores


if __name__ == "__main__":
    with reported_as_one_line():
        main()
