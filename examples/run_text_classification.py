#!/usr/bin/env python
"""Fine-tune an ELMo sentence classifier with the Hugging Face Trainer.

Data: CSV or JSON lines files (a text column and a label column; labels are strings or ints) or a `datasets` name.
Raw text is split into words by `ElmoTokenizer`. Accuracy and macro-F1 come from the offline `classification_f1`
module shipped in `elmo_hf.metrics`.

Training makes at least `--min_updates` optimizer updates (200): with a small training set the number of epochs is
raised until it does, and a line on stderr says so. `--num_train_epochs` is the least number of epochs;
`--min_updates 0` trains exactly that many, and `--max_steps N` exactly N updates.

    python examples/run_text_classification.py [--model_name_or_path BILM_DIR] \
        --train_file train.csv --validation_file dev.csv --test_file test.csv \
        --output_dir out --do_train --do_eval --do_predict --num_train_epochs 3 \
        --eval_strategy epoch --save_strategy epoch --load_best_model_at_end --metric_for_best_model macro_f1
"""

import os
import sys
from dataclasses import dataclass, field

import datasets
import evaluate
import numpy as np
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    set_seed,
)

import elmo_hf
from elmo_hf.hub.model_card import ModelCardArguments
from elmo_hf.metrics import metric_path
from elmo_hf.training.task_words import TaskWordArguments
from elmo_hf.training.training_schedule import MinUpdatesArguments
from elmo_hf.training.weight_averaging import WeightAveragingArguments
from elmo_hf.user_errors import UserInputError, reported_as_one_line

HEAD_FIELDS = (
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
        metadata={"help": "A converted ELMo biLM (or a trained ELMo classifier); default: elmo_hf.DEFAULT_MODEL."},
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer path; the model's by default."})
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
    train_file: str | None = field(default=None, metadata={"help": "A .csv or .json/.jsonl file."})
    validation_file: str | None = field(default=None, metadata={"help": "Same format as the train file."})
    test_file: str | None = field(default=None, metadata={"help": "Same format; predictions are written for it."})
    dataset_name: str | None = field(default=None, metadata={"help": "A `datasets` name instead of files."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "The `datasets` configuration."})
    text_column_name: str = field(default="text", metadata={"help": "Column with the raw text."})
    label_column_name: str = field(default="label", metadata={"help": "Column with the label."})
    max_words: int | None = field(default=None, metadata={"help": "Truncate texts to this many words."})


def load_splits(data_args):
    if data_args.dataset_name is not None:
        return datasets.load_dataset(data_args.dataset_name, data_args.dataset_config_name)
    files = {"train": data_args.train_file, "validation": data_args.validation_file, "test": data_args.test_file}
    files = {split: path for split, path in files.items() if path is not None}
    if not files:
        raise UserInputError(
            "--train_file: give --dataset_name or at least one of --train_file, --validation_file, --test_file"
        )
    splits = {}
    for split, path in files.items():
        if not os.path.isfile(path):
            raise UserInputError(f"{path}: no such file; expected the {split} split as .csv or .json")
        kind = "csv" if path.endswith(".csv") else "json"
        splits[split] = datasets.load_dataset(kind, data_files=path, split="train")
    return datasets.DatasetDict(splits)


def label_names(splits, label_column):
    feature = next(iter(splits.values())).features[label_column]
    if isinstance(feature, datasets.ClassLabel):
        return feature.names
    return [str(name) for name in sorted({label for split in splits.values() for label in split[label_column]})]


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
    names = label_names(splits, data_args.label_column_name)
    existing = elmo_hf.ElmoConfig.from_pretrained(model_args.model_name_or_path)
    if existing.architectures and "ElmoForSequenceClassification" in existing.architectures:
        names = [existing.id2label[i] for i in range(existing.num_labels)]  # a trained classifier keeps its labels
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
                existing,
                [tokenizer.tokenize(text) for text in splits["train"][data_args.text_column_name]],
                model_args.model_name_or_path,
            )
        )
    set_seed(training_args.seed)  # the head's new weights start from the seed, as the Trainer's data order does
    model = AutoModelForSequenceClassification.from_pretrained(
        model_args.model_name_or_path,
        num_labels=len(names),
        id2label=dict(enumerate(names)),
        label2id=label2id,
        **head_options,
        problem_type="single_label_classification",
    )
    loaded = task_word_args.initialise(model, model_args.model_name_or_path)
    if loaded is not None and training_args.should_log:
        print(loaded, file=sys.stderr)
    is_class_label = isinstance(next(iter(splits.values())).features[data_args.label_column_name], datasets.ClassLabel)

    def encode(examples, indices, split_name):
        encoding = tokenizer(
            examples[data_args.text_column_name],
            truncation=data_args.max_words is not None,
            max_length=None if data_args.max_words is None else data_args.max_words + 2,
        )
        labels = []
        for index, label in zip(indices, examples[data_args.label_column_name]):
            if is_class_label:
                labels.append(label)
            elif str(label) not in label2id:
                raise UserInputError(f"{split_name} example {index}: unknown label {label!r}; the model knows {names}")
            else:
                labels.append(label2id[str(label)])
        encoding["labels"] = labels
        return encoding

    encoded = {
        name: split.map(
            encode, batched=True, with_indices=True, remove_columns=split.column_names, fn_kwargs={"split_name": name}
        )
        for name, split in splits.items()
    }
    metric = evaluate.load(metric_path("classification_f1"))

    def compute_metrics(evaluation):
        return metric.compute(predictions=np.argmax(evaluation.predictions, -1), references=evaluation.label_ids)

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
        data_collator=DataCollatorWithPadding(tokenizer),
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
        if trainer.is_world_process_zero():
            path = os.path.join(training_args.output_dir, "test_predictions.tsv")
            with open(path, "w", encoding="utf-8") as writer:
                writer.write("index\tprediction\n")
                for index, prediction in enumerate(np.argmax(output.predictions, -1)):
                    writer.write(f"{index}\t{names[prediction]}\n")
    if scores is not None or push:
        metrics, split = scores or (None, None)
        files = {"test": data_args.test_file, "validation": data_args.validation_file}
        dataset = data_args.dataset_name or (split and os.path.basename(files[split]))
        card_args.publish(trainer, metrics, task="text-classification", dataset=dataset, split=split, push=push)
    return trainer


if __name__ == "__main__":
    with reported_as_one_line():  # a data error is one line; ELMO_HF_DEBUG=1 shows its traceback
        main(sys.argv[1:])
