#!/usr/bin/env python
"""What the task input buys, one factor at a time: the recipe's head with and without ELMo, beside a scikit-learn
baseline, on the public data of `downstream_benchmark.py`.

    python examples/task_input_study.py --task sentiment \
        --variant '{"scalar_mix_dropout": 0.0, "classifier_dropout": 0.3}' --seeds 0 1 2 --output outputs/study.jsonl
    python examples/task_input_study.py --task pos --variant '{"fraction": 0.01, "use_input_elmo": false}' --seeds 0 1 2
    python examples/task_input_study.py --task pos --baseline
    python examples/task_input_study.py --task sentiment --variant '{"freeze_bilm": false, "bilm_lr": 3e-4}'
    python examples/task_input_study.py --task pos --variant '{"fraction": 0.01, "word_vectors": "news-vectors.txt"}'
    python examples/task_input_study.py --task sentiment --write-text outputs/sentiment-text
    python examples/task_input_study.py --task sentiment --bilm outputs/sentiment-lm   # a biLM fine-tuned on that text

Each run trains an `ElmoForSequenceClassification` / `ElmoForTokenClassification` head (one-layer task biLSTM of 128
per direction) on the frozen default biLM's layers, computed once per sentence (`--cache` keeps them on disk), with
AdamW at a constant learning rate, batches of 32 in a seeded order; after every epoch it scores dev and test, and
reports the test accuracy of the epoch best on dev. The variant is a JSON object of `ElmoConfig` head fields plus:
`epochs` (sentiment 4, pos 8), `lr` (3e-3, 5e-3), `batch_size` (32), `weight_decay` (0), `min_count` (the task
vocabulary's minimum count, 2; 0: no task word embedding), `from_bilm` (start the task words from the biLM's softmax,
true), `word_vectors` (start the task words from this GloVe/word2vec text file instead, its width; none),
`pretrained_vocab` (add every word that has a pretrained vector, from the file or the biLM's vocabulary, to the
task vocabulary, so that words unseen in training keep their vector; false),
`fraction` (pos: train on this share of the training sentences, a seeded sample; 1.0), `bilm_lr` (the biLM's learning
rate when `"freeze_bilm": false`; the head's). With `"freeze_bilm": false` the head starts from the default biLM's
weights and fine-tunes them: the biLM then runs inside every training and scoring pass instead of once beforehand.
`--baseline` prints the task's scikit-learn baseline instead (bag-of-words logistic regression / feature-based
tagger), trained on each seed's sample of the training sentences when the variant gives a `fraction`.

Prints one JSON line per call (the variant, dev and test accuracy per seed, the chosen epochs, seconds) and appends it
to `--output`.
"""

import argparse
import json
import os
import random
import time

import downstream_benchmark as benchmark
import torch

from elmo_hf import (
    DEFAULT_MODEL,
    ElmoConfig,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)
from elmo_hf.training.task_words import (
    add_pretrained_words,
    build_task_word_vocab,
    initialise_task_words,
    pretrained_word_list,
    read_word_vectors,
)

DEFAULTS = {"sentiment": {"epochs": 4, "lr": 3e-3}, "pos": {"epochs": 8, "lr": 5e-3}}


def load_task(task, data_dir, tokenizer):
    """(words per split, labels per split, label names, the splits as downstream_benchmark reads them)."""
    if task == "pos":
        wheel = benchmark.find_or_fetch(
            data_dir, "decomp-0.3.2-*.whl", benchmark.DECOMP, ["--only-binary=:all:", "--python-version", "3.12"]
        )
        splits = benchmark.load_ewt(wheel)
        names = sorted({tag for split in splits.values() for _, tags in split for tag in tags})
        tag_ids = {name: index for index, name in enumerate(names)}
        words = {split: [w for w, _ in examples] for split, examples in splits.items()}
        labels = {split: [[tag_ids[t] for t in tags] for _, tags in examples] for split, examples in splits.items()}
    else:
        sdist = benchmark.find_or_fetch(data_dir, "vaderSentiment-3.3.2.tar.gz", benchmark.VADER, ["--no-binary=:all:"])
        splits = benchmark.load_movie_reviews(sdist)
        names = ["negative", "positive"]
        words = {
            split: [tokenizer.tokenize(text) or ["."] for text, _ in examples] for split, examples in splits.items()
        }
        labels = {split: [label for _, label in examples] for split, examples in splits.items()}
    return words, labels, names, splits


def batches(task, words, labels, layers, tokenizer, indices, batch_size, rng=None):
    """Padded batches (character ids, mask, stacked biLM layers or None without `layers`, labels) of `indices`,
    shuffled by `rng` if given."""
    order = list(indices)
    if rng is not None:
        rng.shuffle(order)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        encoding = tokenizer([words[row] for row in rows], is_split_into_words=True, padding=True, return_tensors="pt")
        width = encoding["input_ids"].shape[1]
        states = None if layers is None else torch.zeros(len(rows), layers[0].shape[0], width, layers[0].shape[-1])
        if task == "pos":
            targets = torch.full((len(rows), width), -100)
        for position, row in enumerate(rows):
            if states is not None:
                states[position, :, : layers[row].shape[1]] = layers[row]
            if task == "pos":
                targets[position, 1 : 1 + len(labels[row])] = torch.tensor(labels[row])
        if task != "pos":
            targets = torch.tensor([labels[row] for row in rows])
        yield encoding["input_ids"], encoding["attention_mask"], states, targets


def run(
    task, variant, seed, words, labels, layers, names, tokenizer, bilm_config, score_layers=None, bilm=DEFAULT_MODEL
):
    """Trains one head; returns (best dev accuracy, its test accuracy, its epoch). `layers` is None when the biLM is
    fine-tuned; the dev and test passes read `score_layers` where given (the same sentences' layers computed another
    way, e.g. in bfloat16), else `layers`. `bilm` is the biLM's directory (its softmax starts the task words)."""
    score_layers = layers if score_layers is None else score_layers
    options = {
        **DEFAULTS[task],
        "batch_size": 32,
        "min_count": 2,
        "from_bilm": True,
        "weight_decay": 0.0,
        "fraction": 1.0,
        "word_vectors": None,
        "pretrained_vocab": False,
        **variant,
    }
    epochs, lr, batch_size = options.pop("epochs"), options.pop("lr"), options.pop("batch_size")
    min_count, from_bilm, weight_decay = options.pop("min_count"), options.pop("from_bilm"), options.pop("weight_decay")
    fraction, word_vectors, bilm_lr = options.pop("fraction"), options.pop("word_vectors"), options.pop("bilm_lr", lr)
    pretrained_vocab = options.pop("pretrained_vocab")
    train = benchmark.training_sample(len(words["train"]), fraction, seed)
    if min_count:
        vocab = build_task_word_vocab([words["train"][row] for row in train], min_count)
        vectors = read_word_vectors(word_vectors) if word_vectors else {}
        if word_vectors:
            options["task_word_embedding_dim"] = len(next(iter(vectors.values())))
        elif from_bilm:
            options.setdefault("task_word_embedding_dim", bilm_config.projection_dim)
        if pretrained_vocab:  # the words with a pretrained vector join the training words
            softmax_words = [] if word_vectors else pretrained_word_list(bilm_path=bilm if from_bilm else None)
            vocab = add_pretrained_words(vocab, list(vectors) or softmax_words)
        options["task_word_vocab"] = vocab
    bilm_fields = {key: value for key, value in bilm_config.to_dict().items() if key not in ("id2label", "label2id")}
    config = ElmoConfig(**{**bilm_fields, "num_labels": len(names), **options})
    torch.manual_seed(seed)
    model = (ElmoForTokenClassification if task == "pos" else ElmoForSequenceClassification)(config)
    if min_count and (word_vectors or from_bilm):
        initialise_task_words(model, vectors_file=word_vectors or None, bilm_path=bilm)
    if not config.freeze_bilm:
        model.elmo.load_state_dict(ElmoModel.from_pretrained(bilm).state_dict())
    bilm_parameters = {id(p) for p in model.elmo.parameters()}
    head = [p for p in model.parameters() if p.requires_grad and id(p) not in bilm_parameters]
    groups = [{"params": head}] + ([] if config.freeze_bilm else [{"params": model.elmo.parameters(), "lr": bilm_lr}])
    optimizer = torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay)
    rng, best = random.Random(seed), (-1.0, None, None)
    for epoch in range(epochs):
        model.train()
        for input_ids, mask, states, targets in batches(
            task, words["train"], labels["train"], layers["train"], tokenizer, train, batch_size, rng
        ):
            optimizer.zero_grad()
            model(input_ids=input_ids, attention_mask=mask, elmo_hidden_states=states, labels=targets).loss.backward()
            optimizer.step()
        model.eval()
        accuracy = {}
        with torch.no_grad():
            for split in ("dev", "test"):
                correct = total = 0
                for input_ids, mask, states, targets in batches(
                    task, words[split], labels[split], score_layers[split], tokenizer, range(len(words[split])), 128
                ):
                    predicted = model(
                        input_ids=input_ids, attention_mask=mask, elmo_hidden_states=states
                    ).logits.argmax(-1)
                    scored = targets != -100
                    correct += int((predicted[scored] == targets[scored]).sum())
                    total += int(scored.sum())
                accuracy[split] = correct / total
        if accuracy["dev"] > best[0]:
            best = (accuracy["dev"], accuracy["test"], epoch + 1)
    return best


def frozen_layers(args, words, tokenizer):
    """Each split's biLM layers per sentence, `(layers, tokens, dim)` each, from `args.cache` or computed (and kept
    there)."""
    if args.cache and os.path.exists(args.cache):
        return torch.load(args.cache)
    bilm = ElmoModel.from_pretrained(args.bilm).eval()
    layers = {split: benchmark.bilm_layers(bilm, tokenizer, words[split], 64, split) for split in words}
    if args.cache:
        torch.save(layers, args.cache)
    return layers


def linear_probe(layers, labels, strengths=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)):
    """How much of a sentence's label the frozen layers carry linearly: a logistic regression on each layer's mean and
    maximum over the sentence's positions (standardised on train), its inverse regularisation C chosen on dev.
    Returns (dev accuracy, test accuracy, C)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    def pooled(sentence_layers):  # (layers, tokens, dim) -> (layers * 2 * dim,)
        sentence_layers = sentence_layers.float()
        return torch.cat([sentence_layers.mean(1), sentence_layers.amax(1)], -1).flatten().numpy()

    features = {split: np.stack([pooled(sentence) for sentence in layers[split]]) for split in ("train", "dev", "test")}
    scaler = StandardScaler().fit(features["train"])
    features = {split: scaler.transform(values) for split, values in features.items()}
    best = (-1.0, None, None)
    for strength in strengths:
        classifier = LogisticRegression(C=strength, max_iter=2000).fit(features["train"], labels["train"])
        dev = float(classifier.score(features["dev"], labels["dev"]))
        if dev > best[0]:
            best = (dev, float(classifier.score(features["test"], labels["test"])), strength)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=benchmark.TASKS, required=True)
    parser.add_argument("--variant", default="{}", help="a JSON object of head fields and training options")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--baseline", action="store_true", help="print the scikit-learn baseline instead")
    parser.add_argument(
        "--linear-probe",
        action="store_true",
        help="sentiment: instead, a logistic regression on the frozen layers' mean and max over each sentence",
    )
    parser.add_argument("--data-dir", default="outputs/downstream-data")
    parser.add_argument("--cache", help="keep the biLM's layers in this file (computed once)")
    parser.add_argument(
        "--score-cache",
        help="score dev and test on the layers in this file instead (a --cache file of the same task, computed in "
        "another mode): a head trained on one mode's layers, served on another's",
    )
    parser.add_argument(
        "--bilm",
        default=DEFAULT_MODEL,
        help="the biLM (an ElmoForPreTraining directory), e.g. one fine-tuned on the task's training text by "
        "run_bilm_pretraining.py (default: the shipped default model)",
    )
    parser.add_argument("--output", help="append the JSON line to this file")
    parser.add_argument(
        "--write-text",
        metavar="DIR",
        help="instead, write the task's train and dev sentences as DIR/train.txt, DIR/dev.txt (words split by spaces, "
        "a sentence per line: run_bilm_pretraining.py's input, to fine-tune the biLM on the task's own text)",
    )
    args = parser.parse_args(argv)
    if args.linear_probe and args.task != "sentiment":
        parser.error(f"--linear-probe scores sentence labels: use it with --task sentiment, not {args.task}")
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    tokenizer = ElmoTokenizer.from_pretrained(args.bilm)
    words, labels, names, splits = load_task(args.task, args.data_dir, tokenizer)
    if args.write_text:
        os.makedirs(args.write_text, exist_ok=True)
        for split in ("train", "dev"):
            with open(os.path.join(args.write_text, f"{split}.txt"), "w", encoding="utf-8") as text:
                text.writelines(" ".join(sentence) + "\n" for sentence in words[split])
        return {split: len(words[split]) for split in ("train", "dev")}
    start = time.time()
    if args.baseline:
        baseline = benchmark.feature_tagger_accuracy if args.task == "pos" else benchmark.bag_of_words_accuracy
        fraction = json.loads(args.variant).get("fraction", 1.0)
        result = {"task": args.task, "baseline": benchmark.BASELINE_NAMES[args.task]}
        if fraction == 1.0:
            result.update(baseline(splits))
        else:  # trained on each seed's sample of the training sentences, as the heads are
            samples = [benchmark.training_sample(len(splits["train"]), fraction, seed) for seed in args.seeds]
            scores = [baseline({**splits, "train": [splits["train"][row] for row in rows]}) for rows in samples]
            result.update(
                fraction=fraction, seeds=args.seeds, **{s: [score[s] for score in scores] for s in ("dev", "test")}
            )
    elif args.linear_probe:
        dev, test, strength = linear_probe(frozen_layers(args, words, tokenizer), labels)
        result = {
            "task": args.task,
            "linear_probe": "mean and max of each layer",
            "C": strength,
            "dev": dev,
            "test": test,
        }
    else:
        variant = json.loads(args.variant)
        if not variant.get("freeze_bilm", True):
            layers = {split: None for split in words}  # the biLM runs in the training loop
        else:
            layers = frozen_layers(args, words, tokenizer)
        bilm_config = ElmoConfig.from_pretrained(args.bilm)
        score_layers = torch.load(args.score_cache) if args.score_cache else None
        runs = [
            run(args.task, variant, seed, words, labels, layers, names, tokenizer, bilm_config, score_layers, args.bilm)
            for seed in args.seeds
        ]
        result = {
            "task": args.task,
            "variant": variant,
            **({"bilm": args.bilm} if args.bilm != DEFAULT_MODEL else {}),
            **({"score_cache": args.score_cache} if args.score_cache else {}),
            "seeds": args.seeds,
            "dev": [r[0] for r in runs],
            "test": [r[1] for r in runs],
            "epochs": [r[2] for r in runs],
        }
    result["seconds"] = round(time.time() - start)
    line = json.dumps(result)
    print(line, flush=True)
    if args.output:
        with open(args.output, "a", encoding="utf-8") as output:
            output.write(line + "\n")
    return result


if __name__ == "__main__":
    main()
