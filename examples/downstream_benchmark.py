#!/usr/bin/env python
"""The paper's claim on real data, one command: does ELMo help a tagger and a classifier, and which layer helps?

    python examples/downstream_benchmark.py --model tests/models/elmo-news-small --output-dir outputs/downstream

Tasks (data from registry packages, read from their archives without installing them; `--data-dir` is searched
first, and a missing archive is fetched there with `pip download`):
- `pos`: universal part-of-speech tags of Universal Dependencies English-EWT (12,543 / 2,002 / 2,077 sentences), from
  the `decomp==0.3.2` wheel (`decomp/data/2.0/normalized/sentence/uds-ewt-sentences-{train,dev,test}-normalized.json`,
  the syntax-domain tokens' `form` and `upos`; CC BY-SA 4.0). Metric: UPOS accuracy on test.
- `sentiment`: polarity of the 10,605 movie-review snippets of Hutto and Gilbert (2014), from the
  `vaderSentiment==3.3.2` sdist (`additional_resources/hutto_ICWSM_2014.tar.gz`, `movieReviewSnippets_GroundTruth.txt`;
  MIT). Scores of exactly 0 are dropped, the label is the score's sign, and a fixed split (seeded shuffle: 80% train,
  10% dev, 10% test) is made. Metric: test accuracy.

Rows (`ElmoForTokenClassification` / `ElmoForSequenceClassification` with a one-layer task biLSTM, trained with the
`Trainer` on the recipe of `examples/README.md`, the biLM frozen, `--seeds` seeds each). The task input `x_k` is a
trainable task word embedding over the training words seen twice and every word of the biLM's softmax vocabulary,
started from the biLM's softmax embeddings (the paper's pretrained word vectors); the biLM's token layer is in
`ELMo_k`'s mix, not in `x_k` (`--token-layer-in-x-k` puts it there too; `--task-word-min-count 0` leaves the task
word embedding out and the token layer in `x_k`). Mix dropout 0, classifier dropout 0.3, word dropout 0.25 on the task
word embedding for tags (none for polarity), AdamW with a linear decay from 5e-3 over 8 epochs (tags) or 3e-3 over 4
(polarity), batches of 32; dev and test are scored after every epoch,
and a row reports the test accuracy of its epoch best on dev, as the recipe keeps that epoch's model. Rows
(`--rows`; the first three by default):
- `without_elmo`: `x_k` alone, the task model without ELMo (the paper's baseline);
- `baseline`: the scalar mix frozen on the token layer: `x_k` beside the biLM's context-independent token vectors,
  without its LSTM layers;
- `all`: the learned mix of all layers (the recipe);
- `top`: ELMo from the top layer only (the mix frozen on it);
- `input_output`: the learned mix at the task biLSTM's input and a second one at its output (`use_output_elmo`).
A scikit-learn baseline is printed beside each task: a bag-of-words logistic regression (polarity) and a
feature-based logistic-regression tagger (UPOS). `--fractions 0.01 0.1` adds sample-efficiency columns for `pos`:
every row, and the feature-based tagger, trained on that share of the training sentences (a seeded sample per seed);
every run trains for at least `--min-updates` batches (200, as the example scripts' `--min_updates`), so 1% of EWT (4
batches an epoch) gets 50 epochs instead of 8. `--fractions-only` skips the rows on all of EWT.
The biLM is frozen, so its layers are computed once per sentence and passed to every head as `elmo_hidden_states`:
the numbers are those of heads that run the biLM themselves, at a fraction of the time.

Layer probes (the paper's section 5.3, for `pos`): a linear classifier on each frozen layer alone (layer 0: the token
vectors; then each biLSTM layer), trained with Adam on the training tokens; test accuracy per layer.

Writes `results.json` (every seed's score, means, standard deviations, ELMo's gain seed by seed, learned layer weights,
settings, timings) and `layer_weights.png` (each task's learned layer weights, the paper's Figure 2; needs matplotlib)
into `--output-dir`, and prints Markdown tables: the rows, ELMo's gain (`all` - `without_elmo`) seed by seed beside
two standard deviations of each row's seeds, the shares, the probes and the layer weights.
"""

import argparse
import glob
import io
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

import torch
from tqdm import tqdm
from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments
from transformers.utils import logging as transformers_logging

from elmo_hf import (
    ElmoConfig,
    ElmoEmbedder,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)
from elmo_hf.model.modeling_elmo import decoded_tags
from elmo_hf.training.task_words import (
    add_pretrained_words,
    build_task_word_vocab,
    initialise_task_words,
    pretrained_word_list,
)
from elmo_hf.training.training_schedule import MIN_UPDATES, epochs_for_min_updates, updates_per_epoch
from elmo_hf.training.weight_averaging import WeightAveragingArguments
from elmo_hf.user_errors import UserInputError, reported_as_one_line

DECOMP = "decomp==0.3.2"
VADER = "vaderSentiment==3.3.2"
EWT_MEMBER = "decomp/data/2.0/normalized/sentence/uds-ewt-sentences-{split}-normalized.json"
SNIPPETS_ARCHIVE = "additional_resources/hutto_ICWSM_2014.tar.gz"
SNIPPETS_MEMBER = "movieReviewSnippets_GroundTruth.txt"
ROWS = ("without_elmo", "baseline", "all", "top", "input_output")
DEFAULT_ROWS = ("without_elmo", "baseline", "all")
RECIPE = {
    "pos": {"epochs": 8.0, "learning_rate": 5e-3, "task_word_dropout": 0.25},
    "sentiment": {"epochs": 4.0, "learning_rate": 3e-3, "task_word_dropout": 0.0},
}
TASKS = ("pos", "sentiment")
BASELINE_NAMES = {"pos": "feature-based logistic-regression tagger", "sentiment": "bag-of-words logistic regression"}
OFF = -1e4  # a mix weight whose softmax share is exactly 0 in float32


# ---- data ----


def find_or_fetch(data_dir, pattern, requirement, pip_arguments):
    """The archive in `data_dir` matching `pattern`, fetched from the package index with pip when missing."""
    found = sorted(glob.glob(os.path.join(data_dir, pattern)))
    if not found:
        os.makedirs(data_dir, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", data_dir, *pip_arguments, requirement]
        print(f"fetching {requirement}: {' '.join(command)}", file=sys.stderr)
        subprocess.run(command, check=True)
        found = sorted(glob.glob(os.path.join(data_dir, pattern)))
    if not found:
        raise UserInputError(f"{data_dir}: no {pattern} after pip download of {requirement}")
    return found[-1]


def load_ewt(wheel):
    """{split: [(words, upos tags)]} for train, dev and test of UD English-EWT, in treebank order."""
    splits = {}
    with zipfile.ZipFile(wheel) as archive:
        for split in ("train", "dev", "test"):
            try:
                graphs = json.loads(archive.read(EWT_MEMBER.format(split=split)))["data"]
            except KeyError:
                raise UserInputError(f"{wheel}: has no {EWT_MEMBER.format(split=split)}; expected {DECOMP}") from None
            sentences = []
            for name in sorted(graphs, key=lambda name: int(name.rsplit("-", 1)[1])):  # ewt-train-1, ewt-train-2, ...
                nodes = graphs[name]["nodes"]
                tokens = [node for node in nodes if node.get("domain") == "syntax" and node.get("type") == "token"]
                tokens.sort(key=lambda node: node["position"])
                sentences.append(([node["form"] for node in tokens], [node["upos"] for node in tokens]))
            splits[split] = sentences
    return splits


def load_movie_reviews(sdist, seed=0):
    """{split: [(text, label)]}: the snippets with a non-zero score, label 1 if positive, split 80/10/10 after a
    shuffle seeded with `seed`."""
    with tarfile.open(sdist) as outer:
        members = [name for name in outer.getnames() if name.endswith(SNIPPETS_ARCHIVE)]
        if not members:
            raise UserInputError(f"{sdist}: has no {SNIPPETS_ARCHIVE}; expected the {VADER} sdist")
        with tarfile.open(fileobj=io.BytesIO(outer.extractfile(members[0]).read())) as inner:
            member = next(name for name in inner.getnames() if name.endswith(SNIPPETS_MEMBER))
            lines = inner.extractfile(member).read().decode("utf-8").splitlines()
    examples = []
    for line in lines:
        if line.strip():
            _, score, text = line.split("\t", 2)
            if float(score) != 0.0:
                examples.append((text.strip(), int(float(score) > 0)))
    random.Random(seed).shuffle(examples)
    train_end, dev_end = int(0.8 * len(examples)), int(0.9 * len(examples))
    return {"train": examples[:train_end], "dev": examples[train_end:dev_end], "test": examples[dev_end:]}


# ---- the frozen biLM's layers, once per sentence ----


def bilm_layers(model, tokenizer, sentences, batch_size, description):
    """Every layer of the frozen biLM for each sentence (a list of words): a list of `(layers, words + 2, 2 *
    projection_dim)` tensors, `<S>` and `</S>` included, batched by length as `ElmoEmbedder` batches."""
    embedder = ElmoEmbedder(model, tokenizer)
    arrays = embedder.embed_sentences(sentences, batch_size=batch_size, boundaries=True, progress=description)
    return [torch.from_numpy(array) for array in arrays]


class LayersDataset(torch.utils.data.Dataset):
    """Examples of precomputed biLM layers, their character ids (for task word embeddings) and their labels (a tag
    per word, or one class per sentence)."""

    def __init__(self, layers, char_ids, labels):
        self.layers, self.char_ids, self.labels = layers, char_ids, labels

    def __len__(self):
        return len(self.layers)

    def __getitem__(self, index):
        return {
            "elmo_hidden_states": self.layers[index],
            "input_ids": self.char_ids[index],
            "labels": self.labels[index],
        }

    def subset(self, indices):
        return LayersDataset(
            [self.layers[i] for i in indices], [self.char_ids[i] for i in indices], [self.labels[i] for i in indices]
        )


def collate(examples):
    """Pads `(layers, words, dim)` examples to `(batch, layers, max words, dim)` with an attention mask; tag labels
    (one per word, boundaries -100) are padded with -100."""
    width = max(example["elmo_hidden_states"].shape[1] for example in examples)
    num_layers, _, dim = examples[0]["elmo_hidden_states"].shape
    states = torch.zeros(len(examples), num_layers, width, dim)
    mask = torch.zeros(len(examples), width, dtype=torch.long)
    for row, example in enumerate(examples):
        words = example["elmo_hidden_states"].shape[1]
        states[row, :, :words] = example["elmo_hidden_states"]
        mask[row, :words] = 1
    input_ids = torch.zeros(len(examples), width, examples[0]["input_ids"].shape[-1], dtype=torch.long)
    for row, example in enumerate(examples):
        input_ids[row, : len(example["input_ids"])] = example["input_ids"]
    batch = {"elmo_hidden_states": states, "input_ids": input_ids, "attention_mask": mask}
    if isinstance(examples[0]["labels"], torch.Tensor):  # tags: (words,) each
        batch["labels"] = torch.full((len(examples), width), -100, dtype=torch.long)
        for row, example in enumerate(examples):
            batch["labels"][row, : len(example["labels"])] = example["labels"]
    else:
        batch["labels"] = torch.tensor([example["labels"] for example in examples])
    return batch


# ---- heads ----


def row_config(row, num_layers):
    """The head settings of one table row (`num_layers`: the biLM's layers, token layer included)."""
    if row == "without_elmo":
        return {"use_input_elmo": False}
    if row == "baseline":
        return {"scalar_mix_initial_weights": [0.0] + [OFF] * (num_layers - 1), "scalar_mix_trainable": False}
    if row == "top":
        return {"scalar_mix_initial_weights": [OFF] * (num_layers - 1) + [0.0], "scalar_mix_trainable": False}
    if row == "all":
        return {}
    if row == "input_output":
        return {"use_output_elmo": True}
    raise ValueError(f"row: one of {ROWS}, got {row!r}")


@torch.no_grad()
def batch_predictions(model, dataset, batch_size):
    """The model's predicted labels and the gold labels of `dataset`, batch by batch, in order (eval mode):
    `(batch, words)` tensors for tags (`decoded_tags`: Viterbi with a CRF; gold -100 and predicted -1 where
    nothing is scored), `(batch,)` for classes."""
    model.eval()
    for start in range(0, len(dataset), batch_size):
        batch = collate([dataset[index] for index in range(start, min(start + batch_size, len(dataset)))])
        labels = batch.pop("labels")
        logits = model(**batch).logits
        if labels.dim() == 2:  # a tag per word
            yield decoded_tags(model, logits, labels != -100), labels
        else:
            yield logits.argmax(dim=-1), labels


def accuracy(model, dataset, batch_size):
    """Accuracy over the labelled words (tags) or the sentences (classes) of `dataset`."""
    correct = total = 0
    for predictions, labels in batch_predictions(model, dataset, batch_size):
        scored = labels != -100
        correct += int((predictions[scored] == labels[scored]).sum())
        total += int(scored.sum())
    return correct / total


class BestEpochOnDev(TrainerCallback):
    """Scores dev and test after every epoch and keeps the scores of the epoch best on dev, with its input mix's layer
    weights: the choice `--load_best_model_at_end --metric_for_best_model accuracy` makes in the recipe
    (`last=True`: of the last epoch instead)."""

    def __init__(self, datasets, batch_size, last=False, weight_averaging=None):
        self.datasets, self.batch_size, self.last, self.best = datasets, batch_size, last, None
        self.weight_averaging = weight_averaging  # a WeightAveragingCallback: its average is what gets scored

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        if self.weight_averaging is not None:
            self.weight_averaging.put_average_in_model()  # back to the raw weights at the next update
        dev = accuracy(model, self.datasets["dev"], self.batch_size)
        if self.best is None or self.last or dev > self.best["dev"]:  # test is scored only for a kept epoch
            mix = model.task_encoder.input_mix
            self.best = {
                "dev": dev,
                "test": accuracy(model, self.datasets["test"], self.batch_size),
                "epoch": round(state.epoch),
                "layer_weights": None if mix is None else mix.normalized_weights.tolist(),
            }
        model.train()


def train_head(args, task, row, seed, bilm_config, datasets, num_labels, task_words, epoch_choice=BestEpochOnDev):
    """Trains one head with the Trainer; returns the dev and test accuracy of its epoch best on dev, that epoch, and
    the input mix's layer weights then. `task_words`: the task vocabulary (None: no task word embedding).
    `epoch_choice`: the callback class that scores the epochs and keeps the best."""
    head_class = ElmoForTokenClassification if task == "pos" else ElmoForSequenceClassification
    num_layers = bilm_config.num_lstm_layers + 1
    words = (
        {}
        if task_words is None
        else {"task_word_vocab": task_words, "task_word_embedding_dim": bilm_config.projection_dim}
    )
    config = ElmoConfig(
        **{
            **bilm_config.to_dict(),
            "num_labels": num_labels,
            "freeze_bilm": True,
            "task_encoder_layers": args.task_layers,
            "task_encoder_hidden_size": args.task_hidden_size,
            "use_output_elmo": False,
            "use_bilm_token_layer": args.token_layer_in_x_k or task_words is None,
            "classifier_dropout": args.classifier_dropout,
            "task_word_dropout": args.task_word_dropout[task],
            "scalar_mix_dropout": 0.0,
            "scalar_mix_do_layer_norm": args.layer_norm,
            "use_crf": args.crf and task == "pos",
            "scalar_mix_l2_coef": args.mix_l2_coef,
            **words,
            **row_config(row, num_layers),
        }
    )
    torch.manual_seed(seed)
    # The biLM's weights are never used (its layers are precomputed), so the head is built without loading them.
    model = head_class(config)
    if task_words is not None:
        initialise_task_words(model, bilm_path=args.model)
    averaging = WeightAveragingArguments(args.weight_average_decay).callbacks()
    best_epoch = epoch_choice(
        datasets, 4 * args.batch_size, last=not args.epoch_on_dev, weight_averaging=(averaging or [None])[0]
    )
    per_epoch = updates_per_epoch(len(datasets["train"]), args.batch_size)
    epochs = epochs_for_min_updates(args.epochs[task], per_epoch, args.min_updates)  # small shares: more epochs
    with tempfile.TemporaryDirectory() as output_dir:
        training_args = TrainingArguments(
            output_dir=output_dir,
            per_device_train_batch_size=args.batch_size,
            learning_rate=args.learning_rate[task],
            num_train_epochs=epochs,
            weight_decay=0.0,
            seed=seed,
            data_seed=seed,
            save_strategy="no",
            eval_strategy="no",
            logging_strategy="no",
            report_to="none",
            use_cpu=True,
            disable_tqdm=True,
            dataloader_drop_last=False,
        )
        trainer = Trainer(
            model=model,
            args=training_args,
            train_dataset=datasets["train"],
            data_collator=collate,
            callbacks=[*averaging, best_epoch],  # the average is updated before the epoch is scored
        )
        trainer.remove_callback(PrinterCallback)  # one progress bar over the runs instead of a line per run
        trainer.train()
    return best_epoch.best


# ---- simple strong baselines (scikit-learn) ----


def bag_of_words_accuracy(splits):
    """Test accuracy of a logistic regression on lowercased word unigrams and bigrams (scikit-learn defaults, C=1)."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = CountVectorizer(ngram_range=(1, 2), lowercase=True)
    features = vectorizer.fit_transform([text for text, _ in splits["train"]])
    classifier = LogisticRegression(max_iter=1000).fit(features, [label for _, label in splits["train"]])
    return {
        split: float(
            classifier.score(
                vectorizer.transform([text for text, _ in splits[split]]), [label for _, label in splits[split]]
            )
        )
        for split in ("dev", "test")
    }


def word_features(words, position):
    """A feature-based tagger's features of one word: the word, its affixes and shape, and its neighbours."""
    word = words[position]
    shape = "".join("X" if c.isupper() else "x" if c.islower() else "d" if c.isdigit() else c for c in word)[:6]
    features = {
        "word=" + word.lower(): 1,
        "shape=" + shape: 1,
        "prefix=" + word[:3].lower(): 1,
        "suffix2=" + word[-2:].lower(): 1,
        "suffix3=" + word[-3:].lower(): 1,
    }
    for offset in (-2, -1, 1, 2):
        neighbour = words[position + offset].lower() if 0 <= position + offset < len(words) else "<pad>"
        features[f"word{offset:+d}=" + neighbour] = 1
    return features


def fit_feature_tagger(sentences):
    """A logistic-regression tagger (scikit-learn, C=1) on `word_features`, trained on `sentences` ((words, tags)
    pairs): returns `tag(list of word lists)` -> a list of tags per sentence."""
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression

    def features(word_lists):
        return [word_features(words, i) for words in word_lists for i in range(len(words))]

    vectorizer = DictVectorizer()
    train_features = vectorizer.fit_transform(features([words for words, _ in sentences]))
    classifier = LogisticRegression(max_iter=300).fit(train_features, [tag for _, tags in sentences for tag in tags])

    def tag(word_lists):
        predicted = iter(classifier.predict(vectorizer.transform(features(word_lists))))
        return [[next(predicted) for _ in words] for words in word_lists]

    return tag


def feature_tagger_accuracy(splits, tag=None):
    """Dev and test token accuracy of `tag`, a tagger from `fit_feature_tagger` (by default one fitted here on the
    train split)."""
    tag = tag or fit_feature_tagger(splits["train"])
    scores = {}
    for split in ("dev", "test"):
        predicted = tag([words for words, _ in splits[split]])
        pairs = [
            (gold, guess) for (_, tags), guesses in zip(splits[split], predicted) for gold, guess in zip(tags, guesses)
        ]
        scores[split] = sum(gold == guess for gold, guess in pairs) / len(pairs)
    return scores


# ---- layer probes ----


def probe_layer(layers, tags, layer, seed, epochs, batch_size=512):
    """Test accuracy of a linear classifier on one frozen layer's word vectors (boundaries left out)."""

    def tokens(split):
        vectors = torch.cat([states[layer, 1:-1] for states in layers[split]])  # (words, 2 * projection_dim)
        if layer == 0:
            vectors = vectors[:, : vectors.shape[1] // 2]  # layer 0 is [x; x]: the token vector x once
        return vectors, torch.cat(tags[split])

    train_vectors, train_tags = tokens("train")
    test_vectors, test_tags = tokens("test")
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    classifier = torch.nn.Linear(train_vectors.shape[1], int(train_tags.max()) + 1)
    optimizer = torch.optim.Adam(classifier.parameters(), lr=1e-3)
    for _ in range(epochs):
        for batch in torch.randperm(len(train_tags), generator=generator).split(batch_size):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(classifier(train_vectors[batch]), train_tags[batch]).backward()
            optimizer.step()
    with torch.no_grad():
        return float((classifier(test_vectors).argmax(dim=-1) == test_tags).float().mean())


# ---- the run ----


def summary(values):
    return {"mean": statistics.mean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def training_sample(count, fraction, seed):
    """The training sentences (indices, in order) a run of `seed` uses: a seeded sample of `fraction` of `count`."""
    if fraction == 1.0:
        return list(range(count))
    return sorted(random.Random(seed).sample(range(count), max(1, round(fraction * count))))


def split_figures(seed_scores):
    """Dev and test accuracy over seeds (`seed_scores`: {"dev": ..., "test": ...} per seed): each seed's, mean, std."""
    return {
        split: {**summary([score[split] for score in seed_scores]), "seeds": [score[split] for score in seed_scores]}
        for split in ("dev", "test")
    }


def elmo_gain(without_elmo, with_elmo):
    """ELMo's gain seed by seed: `with_elmo` minus `without_elmo` (two rows' `split_figures` over the same seeds, in the
    same order), per split: each seed's gain, their mean and standard deviation, and two standard deviations of each
    row's seeds, the spreads that a gain is weighed against."""
    gains = {}
    for split in ("dev", "test"):
        without, with_ = without_elmo[split]["seeds"], with_elmo[split]["seeds"]
        if len(without) != len(with_):
            raise ValueError(f"ELMo's gain needs the same seeds in both rows, got {len(without)} and {len(with_)}")
        seeds = [b - a for a, b in zip(without, with_)]
        gains[split] = {
            **summary(seeds),
            "seeds": seeds,
            "two_std": {"without_elmo": 2 * without_elmo[split]["std"], "all": 2 * with_elmo[split]["std"]},
        }
    return gains


def gain_lines(results):
    """Markdown rows of ELMo's gain seed by seed on each task's full training data (empty without both rows)."""
    lines = []
    for task, figures in results["tasks"].items():
        rows = figures.get("rows", {})
        if "without_elmo" not in rows or "all" not in rows:
            continue
        for split, gain in elmo_gain(rows["without_elmo"], rows["all"]).items():
            spreads = gain["two_std"]
            lines.append(
                f"| {task} | {split} | {100 * gain['mean']:+.2f} | "
                + ", ".join(f"{100 * value:+.2f}" for value in gain["seeds"])
                + f" | {100 * spreads['without_elmo']:.2f} / {100 * spreads['all']:.2f} |"
            )
    if not lines:
        return []
    return [
        "",
        "| ELMo's gain (all - without_elmo) | split | mean, points | per seed | two standard deviations of the seeds:"
        " without_elmo / all |",
        "|---" * 5 + "|",
        *lines,
    ]


def row_figure(row_scores):
    """One row's seeds: `split_figures`, chosen epochs and layer weights."""
    figure = split_figures(row_scores)
    figure["epochs"] = [score["epoch"] for score in row_scores]
    figure["layer_weights"] = [score["layer_weights"] for score in row_scores]  # per seed, None without a mix
    return figure


def prepare_task(args, task, model, tokenizer, with_baseline=True):
    """(datasets, biLM layers, labels, label names and sizes per split, the scikit-learn baseline's scores (None without
    `with_baseline`), the training sentences' words, the splits as read) of a task."""
    if task == "pos":
        wheel = find_or_fetch(
            args.data_dir, "decomp-0.3.2-*.whl", DECOMP, ["--only-binary=:all:", "--python-version", "3.12"]
        )
        splits = load_ewt(wheel)
        names = sorted({tag for split in splits.values() for _, tags in split for tag in tags})
        tag_ids = {name: index for index, name in enumerate(names)}
        words = {split: [w for w, _ in examples] for split, examples in splits.items()}
        labels = {
            split: [torch.tensor([-100, *(tag_ids[t] for t in tags), -100]) for _, tags in examples]
            for split, examples in splits.items()
        }
    else:
        sdist = find_or_fetch(args.data_dir, "vaderSentiment-3.3.2.tar.gz", VADER, ["--no-binary=:all:"])
        splits = load_movie_reviews(sdist)
        names = ["negative", "positive"]
        words = {
            split: [tokenizer.tokenize(text) or ["."] for text, _ in examples] for split, examples in splits.items()
        }
        labels = {split: [label for _, label in examples] for split, examples in splits.items()}
    if args.max_examples is not None:  # a slice, for quick runs and tests
        words = {split: values[: args.max_examples] for split, values in words.items()}
        labels = {split: values[: args.max_examples] for split, values in labels.items()}
        splits = {split: examples[: args.max_examples] for split, examples in splits.items()}
    baseline = None
    if with_baseline:
        baseline = feature_tagger_accuracy(splits) if task == "pos" else bag_of_words_accuracy(splits)
    layers = {split: bilm_layers(model, tokenizer, words[split], 64, f"{task} {split}: biLM layers") for split in words}
    char_ids = {
        split: [
            tokenizer([sentence], is_split_into_words=True, return_tensors="pt")["input_ids"][0]
            for sentence in words[split]
        ]
        for split in words
    }
    datasets = {split: LayersDataset(layers[split], char_ids[split], labels[split]) for split in words}
    sizes = {split: len(values) for split, values in words.items()}
    return datasets, layers, labels, names, sizes, baseline, words["train"], splits


def mean_layer_weights(results):
    """{task: the `all` row's softmax-normalised layer weights, averaged over its seeds}."""
    weights = {}
    for task, figures in results["tasks"].items():
        if "all" in figures["rows"]:
            per_seed = figures["rows"]["all"]["layer_weights"]
            weights[task] = [statistics.mean(values) for values in zip(*per_seed)]
    return weights


def plot_layer_weights(results, path):
    """The paper's Figure 2: each task's learned weight of every biLM layer (`all` row), as a PNG at `path`; returns
    False (and writes nothing) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    weights = mean_layer_weights(results)
    figure, axis = plt.subplots(figsize=(4.5, 2.8), dpi=120)
    width = 0.8 / max(1, len(weights))
    for index, (task, values) in enumerate(weights.items()):
        axis.bar([layer + index * width for layer in range(len(values))], values, width, label=task)
    count = len(next(iter(weights.values()), []))
    axis.set_xticks([layer + width * (len(weights) - 1) / 2 for layer in range(count)])
    axis.set_xticklabels(["token layer" if layer == 0 else f"LSTM {layer}" for layer in range(count)])
    axis.set_ylabel("softmax weight")
    axis.set_title("Learned ELMo layer weights (input mix)")
    axis.legend(frameon=False)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True


def markdown_table(results):
    shares = [figures["rows"] for figures in results["tasks"].values()]
    shares += [rows for figures in results["tasks"].values() for rows in figures.get("fractions", {}).values()]
    rows = [row for row in ROWS if any(row in share for share in shares)]
    lines = []
    if any(figures["rows"] for figures in results["tasks"].values()):  # not with --fractions-only alone
        lines += [
            "| task (metric) | scikit-learn baseline | " + " | ".join(rows) + " |",
            "|---" * (len(rows) + 2) + "|",
        ]

    def cell(figure):
        return "" if figure is None else f"{100 * figure['test']['mean']:.2f} ± {100 * figure['test']['std']:.2f}"

    for task, figures in results["tasks"].items():
        if not figures["rows"]:  # --fractions-only
            continue
        baseline = f"{100 * figures['scikit_learn_baseline']['test']:.2f} ({BASELINE_NAMES[task]})"
        cells = [cell(figures["rows"].get(row)) for row in rows]
        lines.append(f"| {task} (test accuracy, %) | {baseline} | " + " | ".join(cells) + " |")
    lines += gain_lines(results)
    fractions = results["tasks"].get("pos", {}).get("fractions", {})
    if fractions:
        share_rows = [row for row in rows if any(row in share for share in fractions.values())]
        lines += [
            "",
            "| pos, share of the training sentences | feature-based tagger, same sentences | "
            + " | ".join(share_rows)
            + " | ELMo's gain (all - without_elmo) |",
            "|---" * (len(share_rows) + 3) + "|",
        ]
        pos = results["tasks"]["pos"]
        full = {**pos["rows"], "scikit_learn_baseline": {"test": {"mean": pos["scikit_learn_baseline"]["test"]}}}
        for fraction, figures in [*fractions.items(), *([("1.0", full)] if pos["rows"] else [])]:
            without, with_elmo = figures.get("without_elmo"), figures.get("all")
            gain = (
                ""
                if None in (without, with_elmo)
                else f"{100 * (with_elmo['test']['mean'] - without['test']['mean']):+.2f}"
            )
            baseline = figures["scikit_learn_baseline"]["test"]
            baseline = f"{100 * baseline['mean']:.2f}" + (
                f" ± {100 * baseline['std']:.2f}" if "std" in baseline else ""
            )
            cells = [cell(figures.get(row)) for row in share_rows]
            lines.append(f"| {float(fraction):.0%} | {baseline} | " + " | ".join(cells) + f" | {gain} |")
    if "probes" in results["tasks"].get("pos", {}):
        probes = results["tasks"]["pos"]["probes"]
        lines += [
            "",
            "| pos linear probe | " + " | ".join(f"layer {k}" for k in range(len(probes))) + " |",
            "|---" * (len(probes) + 1) + "|",
            "| test accuracy, % | " + " | ".join(f"{100 * value:.2f}" for value in probes) + " |",
        ]
    weights = mean_layer_weights(results)
    if weights:
        count = len(next(iter(weights.values())))
        lines += [
            "",
            "| learned layer weights (`all`, mean over seeds) | "
            + " | ".join(f"layer {k}" for k in range(count))
            + " |",
            "|---" * (count + 1) + "|",
        ]
        lines += [
            f"| {task} | " + " | ".join(f"{value:.3f}" for value in values) + " |" for task, values in weights.items()
        ]
    return "\n".join(lines)


def parse_arguments(argv=None):
    """The command line's settings; the per-task recipe settings are gathered as {task: value}."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="an ELMo biLM folder or Hub id (ElmoModel weights)")
    parser.add_argument("--output-dir", required=True, help="gets results.json")
    parser.add_argument("--data-dir", default="outputs/downstream-data", help="where the archives are (or go)")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--pos-epochs", type=float, default=RECIPE["pos"]["epochs"])
    parser.add_argument("--sentiment-epochs", type=float, default=RECIPE["sentiment"]["epochs"])
    parser.add_argument("--pos-learning-rate", type=float, default=RECIPE["pos"]["learning_rate"])
    parser.add_argument("--sentiment-learning-rate", type=float, default=RECIPE["sentiment"]["learning_rate"])
    parser.add_argument(
        "--pos-task-word-dropout",
        type=float,
        default=RECIPE["pos"]["task_word_dropout"],
        help="while training, look each word up in the task word embedding as the unknown word with this probability",
    )
    parser.add_argument("--sentiment-task-word-dropout", type=float, default=RECIPE["sentiment"]["task_word_dropout"])
    parser.add_argument("--classifier-dropout", type=float, default=0.3)
    parser.add_argument(
        "--layer-norm",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="normalise each biLM layer (one mean and variance over the batch's real words) before the ELMo mix",
    )
    parser.add_argument(
        "--crf",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="pos: a linear-chain CRF over the tags (Viterbi decoding) instead of one softmax per word",
    )
    parser.add_argument(
        "--mix-l2-coef",
        type=float,
        default=0.0,
        help="add this times the sum of the squared un-normalised layer weights to the loss (pulls toward equal)",
    )
    parser.add_argument(
        "--epoch-on-dev",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="report each run's epoch best on dev (--no-epoch-on-dev: its last epoch)",
    )
    parser.add_argument(
        "--min-updates",
        type=int,
        default=MIN_UPDATES,
        help="train at least this many batches (more epochs on a small share of the training sentences)",
    )
    parser.add_argument(
        "--weight-average-decay",
        type=float,
        default=0.0,
        help="score an exponential moving average of the head's weights with this decay per update (0: off)",
    )
    parser.add_argument("--probe-epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--task-hidden-size", type=int, default=128, help="the task biLSTM's size per direction")
    parser.add_argument("--task-layers", type=int, default=1, help="the task biLSTM's layers")
    parser.add_argument("--max-examples", type=int, help="use only the first N examples of every split (a slice)")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(DEFAULT_ROWS))
    parser.add_argument(
        "--task-word-min-count",
        type=int,
        default=2,
        help="task word embedding over the training words seen this often (0: none, and the token layer in x_k)",
    )
    parser.add_argument(
        "--pretrained-vocab",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="give every word of the biLM's softmax vocabulary a task word row too",
    )
    parser.add_argument(
        "--token-layer-in-x-k",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="put the biLM's token layer in x_k as well as in the mix",
    )
    parser.add_argument(
        "--fractions",
        nargs="*",
        type=float,
        default=[],
        help="pos: also train every row, and the feature-based tagger, on these shares of the training sentences",
    )
    parser.add_argument(
        "--fractions-only", action="store_true", help="pos: train on the --fractions shares only, not on all of it"
    )
    args = parser.parse_args(argv)
    args.epochs = {"pos": args.pos_epochs, "sentiment": args.sentiment_epochs}
    args.learning_rate = {"pos": args.pos_learning_rate, "sentiment": args.sentiment_learning_rate}
    args.task_word_dropout = {"pos": args.pos_task_word_dropout, "sentiment": args.sentiment_task_word_dropout}
    return args


def main(argv=None):
    args = parse_arguments(argv)
    transformers_logging.set_verbosity_error()

    start = time.time()
    model = ElmoModel.from_pretrained(args.model).eval()
    tokenizer = ElmoTokenizer.from_pretrained(args.model)
    cpu = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
        platform.processor(),
    )
    results = {
        "model": args.model,
        "cpu": cpu,
        "threads": torch.get_num_threads(),
        "settings": {key: value for key, value in vars(args).items() if key not in ("model", "output_dir", "data_dir")},
        "tasks": {},
    }
    for task in args.tasks:
        task_start = time.time()
        prepared = prepare_task(args, task, model, tokenizer)
        datasets, layers, labels, names, sizes, baseline, train_words, splits = prepared
        figures = {"sizes": sizes, "labels": names, "rows": {}, "scikit_learn_baseline": baseline}
        fractions = [1.0, *(args.fractions if task == "pos" else [])]
        if task == "pos" and args.fractions_only:
            fractions = args.fractions
        runs = [(fraction, row, seed) for fraction in fractions for row in args.rows for seed in args.seeds]
        softmax_words = pretrained_word_list(bilm_path=args.model) if args.pretrained_vocab else []
        scores = {}
        for fraction, row, seed in tqdm(runs, desc=f"{task}: heads", unit="run", file=sys.stderr):
            sample = training_sample(sizes["train"], fraction, seed)
            subset = {**datasets, "train": datasets["train"].subset(sample)}
            task_words = None
            if args.task_word_min_count:
                task_words = build_task_word_vocab([train_words[i] for i in sample], args.task_word_min_count)
                task_words = add_pretrained_words(task_words, softmax_words)
            score = train_head(args, task, row, seed, model.config, subset, len(names), task_words)
            scores.setdefault((fraction, row), []).append(score)
        for (fraction, row), row_scores in scores.items():
            figure = row_figure(row_scores)
            if fraction == 1.0:
                figures["rows"][row] = figure
            else:
                figures.setdefault("fractions", {}).setdefault(str(fraction), {})[row] = figure
        for fraction in [share for share in fractions if share != 1.0]:  # the tagger on each seed's same sample
            sampled = [
                feature_tagger_accuracy(
                    {**splits, "train": [splits["train"][i] for i in training_sample(sizes["train"], fraction, seed)]}
                )
                for seed in args.seeds
            ]
            figures["fractions"][str(fraction)]["scikit_learn_baseline"] = split_figures(sampled)
        if {"without_elmo", "all"} <= set(figures["rows"]):
            figures["elmo_gain"] = elmo_gain(figures["rows"]["without_elmo"], figures["rows"]["all"])
        if task == "pos":
            tags = {split: [values[1:-1] for values in labels[split]] for split in labels}
            figures["probes"] = [
                probe_layer(layers, tags, layer, args.seeds[0], args.probe_epochs)
                for layer in range(model.config.num_lstm_layers + 1)
            ]
        figures["seconds"] = round(time.time() - task_start, 1)
        results["tasks"][task] = figures
    results["seconds"] = round(time.time() - start, 1)
    os.makedirs(args.output_dir, exist_ok=True)
    with open(os.path.join(args.output_dir, "results.json"), "w", encoding="utf-8") as output:
        json.dump(results, output, indent=1)
    if mean_layer_weights(results) and not plot_layer_weights(
        results, os.path.join(args.output_dir, "layer_weights.png")
    ):
        print("layer_weights.png not written: pip install matplotlib", file=sys.stderr)
    print(markdown_table(results))
    threads = results["threads"]
    print(f"\n{results['seconds'] / 60:.1f} minutes on {cpu}, {threads} thread{'' if threads == 1 else 's'}")
    return results


if __name__ == "__main__":
    with reported_as_one_line():
        main()
