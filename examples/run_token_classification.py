#!/usr/bin/env python
"""Fine-tune an ELMo tagger (NER, POS, chunking) with the Hugging Face Trainer.

Data: CoNLL-style files (one `word ... tag` line per word, the tag in the last column, blank lines between
sentences, `-DOCSTART-` lines skipped) or JSON lines / a `datasets` name with a list of words and a list of tags
per example. Any tag set trains and is scored by the offline `seqeval_f1` module shipped in `elmo_hf.metrics`:
token accuracy always, entity precision/recall/F1 (seqeval) too when the tags are IOB (O, B-X, I-X). For tags such as
part-of-speech, pick the best model by accuracy (`--metric_for_best_model accuracy`).

Training makes at least `--min_updates` optimizer updates (200): with a small training set the number of epochs is
raised until it does, and a line on stderr says so. `--num_train_epochs` is the least number of epochs;
`--min_updates 0` trains exactly that many, and `--max_steps N` exactly N updates.

    python examples/run_token_classification.py [--model_name_or_path BILM_DIR] \
        --train_file train.conll --validation_file dev.conll --test_file test.conll \
        --output_dir out --do_train --do_eval --do_predict --num_train_epochs 3 \
        --eval_strategy epoch --save_strategy epoch --load_best_model_at_end --metric_for_best_model f1
"""

import os
import sys
from dataclasses import dataclass, field

import datasets
import evaluate
import numpy as np
import torch
from transformers import (
    AutoModelForTokenClassification,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    set_seed,
)

import elmo_hf  # registers the ELMo classes with the Auto classes; DEFAULT_MODEL
from elmo_hf.hub.model_card import ModelCardArguments
from elmo_hf.metrics import metric_path
from elmo_hf.training.task_words import TaskWordArguments
from elmo_hf.training.training_schedule import MinUpdatesArguments
from elmo_hf.training.weight_averaging import WeightAveragingArguments
from elmo_hf.user_errors import UserInputError, reported_as_one_line

HEAD_FIELDS = (
    "use_crf",
    "freeze_bilm",
    "task_encoder_hidden_size",
    "task_encoder_layers",
    "use_output_elmo",
    "classifier_dropout",
    "scalar_mix_dropout",
)


@dataclass
class ModelArguments:
    """Head options left unset keep the loaded config's values."""

    model_name_or_path: str = field(
        default=elmo_hf.DEFAULT_MODEL,
        metadata={"help": "A converted ELMo biLM (or a trained ELMo tagger); default: elmo_hf.DEFAULT_MODEL."},
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer path; the model's by default."})
    use_crf: bool | None = field(
        default=None, metadata={"help": "--use_crf true: train a CRF layer and decode with Viterbi."}
    )
    freeze_bilm: bool | None = field(default=None, metadata={"help": "Keep the biLM's weights fixed."})
    task_encoder_hidden_size: int | None = field(default=None, metadata={"help": "Hidden size of the task biLSTM."})
    task_encoder_layers: int | None = field(default=None, metadata={"help": "Layers of the task biLSTM (0: none)."})
    use_output_elmo: bool | None = field(default=None, metadata={"help": "Add a second ELMo mix at the output."})
    classifier_dropout: float | None = field(
        default=None, metadata={"help": "Dropout before the encoder and classifier."}
    )
    scalar_mix_dropout: float | None = field(default=None, metadata={"help": "Dropout on the mixed ELMo vector."})


@dataclass
class DataArguments:
    train_file: str | None = field(default=None, metadata={"help": "CoNLL (.conll/.txt/.iob) or JSON lines file."})
    validation_file: str | None = field(default=None, metadata={"help": "Same format as the train file."})
    test_file: str | None = field(default=None, metadata={"help": "Same format; predictions are written for it."})
    dataset_name: str | None = field(default=None, metadata={"help": "A `datasets` name instead of files."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "The `datasets` configuration."})
    text_column_name: str = field(default="tokens", metadata={"help": "Column with the words (JSON/datasets)."})
    label_column_name: str = field(default="ner_tags", metadata={"help": "Column with the tags (JSON/datasets)."})
    max_words: int | None = field(default=None, metadata={"help": "Truncate sentences to this many words."})


def read_conll(path):
    """A `datasets.Dataset` with `tokens` and `ner_tags` (tag strings) from a CoNLL-style file."""
    sentences, words, tags = [], [], []
    with open(path, encoding="utf-8") as conll:
        for number, line in enumerate(conll, start=1):
            columns = line.split()
            if not columns or columns[0] == "-DOCSTART-":
                if words:
                    sentences.append({"tokens": words, "ner_tags": tags})
                    words, tags = [], []
                continue
            if len(columns) < 2:
                raise UserInputError(f"{path}:{number}: expected a word and a tag, got {line.strip()!r}")
            words.append(columns[0])
            tags.append(columns[-1])
    if words:
        sentences.append({"tokens": words, "ner_tags": tags})
    if not sentences:
        raise UserInputError(f"{path}: no sentences found; expected CoNLL lines of a word and a tag")
    return datasets.Dataset.from_list(sentences)


def load_splits(data_args):
    if data_args.dataset_name is not None:
        return datasets.load_dataset(data_args.dataset_name, data_args.dataset_config_name)
    files = {"train": data_args.train_file, "validation": data_args.validation_file, "test": data_args.test_file}
    splits = {}
    for split, path in files.items():
        if path is None:
            continue
        if not os.path.isfile(path):
            raise UserInputError(f"{path}: no such file; expected the {split} split as CoNLL text or .json")
        if path.endswith((".json", ".jsonl")):
            splits[split] = datasets.load_dataset("json", data_files=path, split="train")
        else:
            splits[split] = read_conll(path)
    if not splits:
        raise UserInputError(
            "--train_file: give --dataset_name or at least one of --train_file, --validation_file, --test_file"
        )
    return datasets.DatasetDict(splits)


def tag_names(splits, label_column):
    """The tag strings, and whether the column already holds class ids (a `datasets` ClassLabel)."""
    feature = next(iter(splits.values())).features[label_column]
    if isinstance(getattr(feature, "feature", None), datasets.ClassLabel):
        return feature.feature.names, True
    return sorted({tag for split in splits.values() for tags in split[label_column] for tag in tags}), False


def tokenize_and_align(examples, tokenizer, label2id, text_column, label_column, are_ids, max_words, split_name):
    encoding = tokenizer(
        examples[text_column],
        is_split_into_words=True,
        truncation=max_words is not None,
        max_length=None if max_words is None else max_words + 2,
    )
    all_labels = []
    for row, (words, tags) in enumerate(zip(examples[text_column], examples[label_column])):
        if len(words) != len(tags):
            raise UserInputError(
                f"{split_name} example {examples['_index'][row]}: {len(words)} words but {len(tags)} tags"
            )
        ids = []
        for word in encoding.word_ids(row):
            if word is None:
                ids.append(-100)
            elif are_ids:
                ids.append(tags[word])
            elif tags[word] not in label2id:
                raise UserInputError(
                    f"{split_name} example {examples['_index'][row]}, word {word} ({words[word]!r}): unknown tag "
                    f"{tags[word]!r}; the model knows {sorted(label2id)}"
                )
            else:
                ids.append(label2id[tags[word]])
        all_labels.append(ids)
    encoding["labels"] = all_labels
    return encoding


def main(argv=None):
    parser = HfArgumentParser(
        (
            ModelArguments,
            TaskWordArguments,
            DataArguments,
            MinUpdatesArguments,
            WeightAveragingArguments,
            ModelCardArguments,
            TrainingArguments,
        )
    )
    model_args, task_word_args, data_args, schedule_args, averaging_args, card_args, training_args = (
        parser.parse_args_into_dataclasses(args=argv)
    )
    splits = load_splits(data_args)
    names, are_ids = tag_names(splits, data_args.label_column_name)

    existing = elmo_hf.ElmoConfig.from_pretrained(model_args.model_name_or_path)
    if existing.architectures and "ElmoForTokenClassification" in existing.architectures:
        names = [existing.id2label[i] for i in range(existing.num_labels)]  # a trained tagger keeps its tags
    label2id = {name: index for index, name in enumerate(names)}
    # Head hyperparameters given on the command line; the others keep the config's values (ElmoConfig's defaults
    # for a biLM, the trained values for a trained head).
    head_options = {
        name: value for name, value in vars(model_args).items() if name in HEAD_FIELDS and value is not None
    }
    tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name or model_args.model_name_or_path)
    if "train" in splits:
        head_options.update(
            task_word_args.head_options(
                existing, list(splits["train"][data_args.text_column_name]), model_args.model_name_or_path
            )
        )
    set_seed(training_args.seed)  # the head's new weights start from the seed, as the Trainer's data order does
    model = AutoModelForTokenClassification.from_pretrained(
        model_args.model_name_or_path,
        num_labels=len(names),
        id2label=dict(enumerate(names)),
        label2id=label2id,
        **head_options,
    )
    loaded = task_word_args.initialise(model, model_args.model_name_or_path)
    if loaded is not None and training_args.should_log:
        print(loaded, file=sys.stderr)

    encoded = {}
    for split_name, split in splits.items():
        split = split.add_column("_index", list(range(len(split))))
        encoded[split_name] = split.map(
            tokenize_and_align,
            batched=True,
            remove_columns=split.column_names,
            fn_kwargs=dict(
                tokenizer=tokenizer,
                label2id=label2id,
                text_column=data_args.text_column_name,
                label_column=data_args.label_column_name,
                are_ids=are_ids,
                max_words=data_args.max_words,
                split_name=split_name,
            ),
        )

    seqeval = evaluate.load(metric_path("seqeval_f1"))

    def predicted_tags(predictions, labels):
        """Tag strings of the scored words: Viterbi paths with a CRF, argmax otherwise."""
        mask = torch.as_tensor(labels) != -100
        paths = model.decode(torch.as_tensor(predictions), mask)
        gold = [[names[t] for t in row[row != -100]] for row in np.asarray(labels)]
        return [[names[t] for t in path] for path in paths], gold

    def compute_metrics(evaluation):
        predictions, gold = predicted_tags(evaluation.predictions, evaluation.label_ids)
        scores = seqeval.compute(predictions=predictions, references=gold)
        # accuracy always; precision, recall and f1 only for IOB tags
        return {key: scores[key] for key in ("precision", "recall", "f1", "accuracy") if key in scores}

    if training_args.do_train and "train" in encoded:
        raised = schedule_args.apply(training_args, len(encoded["train"]))  # small data: more epochs
        if raised is not None and training_args.should_log:
            print(raised, file=sys.stderr)
    push = card_args.take_push(training_args)  # the card's push comes after the evaluation
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=encoded.get("train"),
        eval_dataset=encoded.get("validation"),
        data_collator=DataCollatorForTokenClassification(tokenizer),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        callbacks=averaging_args.callbacks(),
    )
    if training_args.do_train:
        trainer.train()
        trainer.save_model()  # the best model when --load_best_model_at_end
    scores = None  # (metrics, split) of the card: the test split's when scored, else the validation split's
    if training_args.do_eval and "validation" in encoded:
        scores = (trainer.evaluate(), "validation")
        trainer.save_metrics("eval", scores[0])
    if training_args.do_predict and "test" in encoded:
        output = trainer.predict(encoded["test"], metric_key_prefix="test")
        trainer.save_metrics("test", output.metrics)
        scores = (output.metrics, "test")
        predictions, gold = predicted_tags(output.predictions, output.label_ids)
        if trainer.is_world_process_zero():
            path = os.path.join(training_args.output_dir, "test_predictions.txt")
            with open(path, "w", encoding="utf-8") as writer:
                for words, gold_tags, tags in zip(splits["test"][data_args.text_column_name], gold, predictions):
                    for word, gold_tag, tag in zip(words, gold_tags, tags):
                        writer.write(f"{word} {gold_tag} {tag}\n")
                    writer.write("\n")
    if scores is not None or push:
        metrics, split = scores or (None, None)
        files = {"test": data_args.test_file, "validation": data_args.validation_file}
        dataset = data_args.dataset_name or (split and os.path.basename(files[split]))
        card_args.publish(trainer, metrics, task="token-classification", dataset=dataset, split=split, push=push)
    return trainer


if __name__ == "__main__":
    with reported_as_one_line():  # a data error is one line; ELMO_HF_DEBUG=1 shows its traceback
        main(sys.argv[1:])
