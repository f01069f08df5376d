"""The README.md model card of an ELMo checkpoint, filled from the `model_card.md` template shipped with this
package: YAML metadata (written and checked by huggingface_hub's `ModelCardData`), usage code for the checkpoint's
class, the biLM a task head was fine-tuned from, its evaluation, architecture, provenance and measured parity (from
the converter's `conversion_report.json`), citation.

The metadata the Hub reads:
- `pipeline_tag` follows the class (`PIPELINE_TAGS`), so the Hub files a tagger under token classification;
- `base_model`, for a head fine-tuned from a biLM that came from a Hub repo (`config.bilm_name_or_path`);
- `model-index`, the evaluation a `Trainer` measured (`evaluation_results`);
- `tags`: "elmo", the model's `model_tags` and any given.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from huggingface_hub import ModelCard, ModelCardData
    from transformers import PretrainedConfig, PreTrainedModel, Trainer, TrainingArguments

TEMPLATE_PATH = pathlib.Path(__file__).with_name("model_card.md")
CONVERSION_REPORT_NAME = "conversion_report.json"
# The first line of every card's text: `card_for_push` keeps an existing card only when elmo-hf wrote it.
CARD_MARKER = "elmo-hf model card"

PIPELINE_TAGS = {
    "ElmoModel": "feature-extraction",
    # The Hub files models that assign text a probability (the causal language models that `evaluate`'s perplexity
    # scores) under text-generation; ElmoForPreTraining is one: its forward direction predicts each next word (and
    # its backward direction each previous one), and its card's usage code scores sentences by perplexity.
    "ElmoForPreTraining": "text-generation",
    "ElmoForTokenClassification": "token-classification",
    "ElmoForSequenceClassification": "text-classification",
}
AUTO_CLASSES = {
    "ElmoModel": "AutoModel",
    "ElmoForPreTraining": "AutoModelForPreTraining",
    "ElmoForTokenClassification": "AutoModelForTokenClassification",
    "ElmoForSequenceClassification": "AutoModelForSequenceClassification",
}
# Trainer metrics that describe the run, not the model: left out of model-index, as transformers' Trainer does.
_RUN_METRICS = ("runtime", "samples_per_second", "steps_per_second", "epoch", "step")
# A Hub repo id: exactly one "/" between two names (a folder name recorded by a head never has one).
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def evaluation_results(
    metrics: Mapping[str, Any],
    *,
    task: str,
    dataset: str,
    dataset_type: str | None = None,
    split: str | None = None,
    dataset_config: str | None = None,
) -> dict[str, Any]:
    """The evaluation of a model as the card records it, from a `Trainer`'s metrics.

    Args:
        metrics (dict): `Trainer.evaluate()` or `Trainer.predict(...).metrics`: names with the `eval_` / `test_`
            prefix (or none) and their values; the run's figures (runtime, throughput, epoch) are dropped.
        task (str): the Hub task the metrics measure, e.g. "token-classification".
        dataset (str): the dataset's name; `dataset_type` its Hub id (defaults to `dataset`), `split` the split
            scored ("validation", "test"), `dataset_config` its configuration.

    Returns:
        a dict of `task`, `dataset` (name, type, split, config) and `metrics` (name -> float), for
        `render_model_card(evaluation=...)`.
    """
    scores: dict[str, float] = {}
    for name, value in metrics.items():
        bare = re.sub(r"^(eval|test|predict)_", "", name)
        if bare in _RUN_METRICS or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        scores[bare] = float(value)
    if not scores:
        raise ValueError(f"metrics hold no score to record (got {sorted(metrics)})")
    return {
        "task": task,
        "dataset": {"name": dataset, "type": dataset_type or dataset, "split": split, "config": dataset_config},
        "metrics": scores,
    }


def bilm_reference(config: PretrainedConfig) -> tuple[str | None, str | None]:
    """`(hub_id, name)` of the biLM a task head was fine-tuned from (`config.bilm_name_or_path`): the Hub id when it
    came from a Hub repo (then `name` is the same id), else `(None, folder name)`; `(None, None)` when not recorded."""
    recorded = getattr(config, "bilm_name_or_path", None)
    if not recorded:
        return None, None
    return (recorded if _HUB_ID.match(recorded) else None), recorded


def card_metadata(
    model: PreTrainedModel,
    *,
    repo_id: str,
    license: str = "apache-2.0",
    language: Iterable[str] = ("en",),
    datasets: Iterable[str] = (),
    tags: Iterable[str] = (),
    evaluation: Mapping[str, Any] | None = None,
) -> ModelCardData:
    """The card's metadata as huggingface_hub's `ModelCardData` (which checks it and writes model-index)."""
    from huggingface_hub import EvalResult, ModelCardData

    class_name = type(model).__name__
    hub_id, _ = bilm_reference(model.config)
    all_tags = ["elmo"]
    for tag in [*(getattr(model, "model_tags", None) or []), *tags]:
        if tag not in all_tags:
            all_tags.append(tag)
    eval_results = None
    if evaluation is not None:
        dataset = evaluation["dataset"]
        eval_results = [
            EvalResult(
                task_type=evaluation["task"],
                dataset_type=dataset["type"],
                dataset_name=dataset["name"],
                dataset_split=dataset.get("split"),
                dataset_config=dataset.get("config"),
                metric_type=name,
                metric_name=name,
                metric_value=value,
            )
            for name, value in evaluation["metrics"].items()
        ]
    return ModelCardData(
        library_name="transformers",
        pipeline_tag=PIPELINE_TAGS.get(class_name, "feature-extraction"),
        tags=all_tags,
        license=license,
        language=list(language),
        datasets=list(datasets),
        base_model=hub_id,
        model_name=repo_id.rstrip("/").split("/")[-1] if eval_results else None,
        eval_results=eval_results,
    )


def render_model_card(
    model: PreTrainedModel,
    repo_id: str,
    *,
    revision: str | None = None,
    report: Mapping[str, Any] | None = None,
    title: str | None = None,
    license: str = "apache-2.0",
    language: Iterable[str] = ("en",),
    datasets: Iterable[str] = (),
    tags: Iterable[str] = (),
    training_data: str | None = None,
    evaluation: Mapping[str, Any] | None = None,
    baseline: Mapping[str, Any] | None = None,
) -> str:
    """The model card of `model` as a string.

    Args:
        model (`ElmoPreTrainedModel`): the checkpoint's model; its class gives the pipeline tag and the usage code,
            its config the architecture and (for a task head) the biLM it was fine-tuned from.
        repo_id (str): what the usage code passes to `from_pretrained`: a Hub repo id or a local folder.
        revision (str, optional): the branch the usage code loads; the default branch when None.
        report (dict, optional): the converter's `conversion_report.json`; gives provenance and parity.
        title (str, optional): the card's heading; defaults to the last part of `repo_id`.
        license (str, defaults to "apache-2.0"), language (list of str, defaults to ["en"]), datasets (list of
            str, Hub dataset ids the model was trained on), tags (list of str, after "elmo" and the model's
            `model_tags`): metadata.
        training_data (str, optional): a sentence on what the biLM was trained on.
        evaluation (dict, optional): from [`evaluation_results`]; becomes the metadata's model-index and a table.
        baseline (dict, optional): a reference model's scores on the same data, printed beside the evaluation (not
            in model-index, which holds this model's results only): `{"baseline": its name, metric: value, ...}`,
            as `examples/feature_tagger_baseline.py` prints.
    """
    config = model.config
    class_name = type(model).__name__
    arguments = [json.dumps(repo_id)]
    if revision is not None:
        arguments.append(f"revision={json.dumps(revision)}")
    load_arguments = ", ".join([*arguments, "trust_remote_code=True"])
    metadata = card_metadata(
        model, repo_id=repo_id, license=license, language=language, datasets=datasets, tags=tags, evaluation=evaluation
    )
    vocabulary_arguments = ", ".join([arguments[0], '"vocab.txt"', *arguments[1:]])
    usage, usage_notes = _usage(class_name, config, load_arguments, vocabulary_arguments)
    fields = {
        "metadata": metadata.to_yaml() + "\n",
        "marker": CARD_MARKER,
        "title": title or repo_id.rstrip("/").split("/")[-1],
        "summary": _summary(class_name, config),
        "usage": usage,
        "usage_notes": usage_notes,
        "fine_tuning": _fine_tuning(model),
        "evaluation": _evaluation(evaluation, baseline),
        "num_layers": config.num_lstm_layers + 1,
        "num_lstm_layers": config.num_lstm_layers,
        "hidden_size": config.hidden_size,
        "num_characters": config.num_characters,
        "char_embedding_dim": config.char_embedding_dim,
        "max_characters_per_token": config.max_characters_per_token,
        "filters": ", ".join(f"({width}, {count})" for width, count in config.filters),
        "num_filters": config.num_filters,
        "activation": config.activation,
        "num_highway_layers": config.num_highway_layers,
        "projection_dim": config.projection_dim,
        "lstm_dim": config.lstm_dim,
        "use_skip_connections": "yes" if config.use_skip_connections else "no",
        "cell_clip": config.cell_clip if config.cell_clip is not None else "none",
        "proj_clip": config.proj_clip if config.proj_clip is not None else "none",
        "num_parameters": f"{model.num_parameters():,}",
        "provenance": _provenance(report),
        "parity": _parity(report),
        "training_data": training_data or "Not recorded for this checkpoint.",
    }
    card = string.Template(TEMPLATE_PATH.read_text(encoding="utf-8")).substitute(fields)
    return _checked(card)


def write_model_card(
    save_directory: str | os.PathLike[str], model: PreTrainedModel, repo_id: str, **kwargs: Any
) -> str:
    """Write README.md into `save_directory`, reading `conversion_report.json` from there when it exists.
    Keyword arguments are those of `render_model_card`. Returns the card's path."""
    report_path = os.path.join(save_directory, CONVERSION_REPORT_NAME)
    if "report" not in kwargs and os.path.isfile(report_path):
        with open(report_path, encoding="utf-8") as report_file:
            kwargs["report"] = json.load(report_file)
    path = os.path.join(save_directory, "README.md")
    with open(path, "w", encoding="utf-8") as card_file:
        card_file.write(render_model_card(model, repo_id, **kwargs))
    return path


def card_for_push(
    model: PreTrainedModel,
    repo_id: str,
    *,
    token: str | bool | None = None,
    revision: str | None = None,
    tags: Iterable[str] = (),
    folder: str | os.PathLike[str] | None = None,
    **card_options: Any,
) -> str:
    """The README.md that `push_to_hub` publishes for `model` in `repo_id` (which exists) at `revision`.

    An elmo-hf card already there (at `revision`, else on main) is kept, its tags merged with `tags`, unless
    `card_options` (those of `render_model_card`) ask for a new one; any other card (transformers' generic one,
    a `Trainer`'s draft) is replaced by this package's, keeping its tags. `folder`, when given, is the pushed folder:
    its `conversion_report.json` gives provenance."""
    # A card's `data` is typed as the base CardData; a model card's is ModelCardData, which has `tags`.
    existing: Any = _existing_card(repo_id, token=token, revision=revision)
    if existing is not None and CARD_MARKER in existing.text and not card_options:
        card = existing
    else:
        report_path = os.path.join(folder, CONVERSION_REPORT_NAME) if folder is not None else None
        if "report" not in card_options and report_path is not None and os.path.isfile(report_path):
            with open(report_path, encoding="utf-8") as report_file:
                card_options["report"] = json.load(report_file)
        previous_tags = list(existing.data.tags or []) if existing is not None else []
        card_options["tags"] = [*card_options.get("tags", ()), *previous_tags]
        card = _model_card(render_model_card(model, repo_id, revision=revision, **card_options))
    card.data.tags = list(card.data.tags or [])
    for tag in tags:
        if tag not in card.data.tags:
            card.data.tags.append(tag)
    return _checked(str(card))


@dataclass
class ModelCardArguments:
    """The card of a head trained by `examples/run_*_classification.py` (an `HfArgumentParser` dataclass): after
    evaluating, the script writes README.md into `--output_dir` with the scores as model-index, and with
    `--push_to_hub` publishes it with the model (in place of the Trainer's generic card)."""

    card_dataset: str | None = field(
        default=None,
        metadata={"help": "The evaluation data's name in the card (default: --dataset_name, else the file's name)."},
    )
    card_dataset_id: str | None = field(
        default=None, metadata={"help": "The evaluation data's Hub dataset id in model-index (default: its name)."}
    )
    baseline_file: str | None = field(
        default=None,
        metadata={
            "help": "A JSON object of a baseline's scores on the same test data ({'baseline': name, metric: value}, "
            "as examples/feature_tagger_baseline.py prints), shown beside the model's in the card."
        },
    )

    def take_push(self, training_args: TrainingArguments) -> bool:
        """Whether `--push_to_hub` was given; turns it off for the Trainer, whose pushes carry transformers' card:
        `publish` pushes once the scores are known."""
        push, training_args.push_to_hub = training_args.push_to_hub, False
        return push

    def publish(
        self,
        trainer: Trainer,
        metrics: Mapping[str, Any] | None,
        *,
        task: str,
        dataset: str,
        split: str | None,
        push: bool = False,
    ) -> str | None:
        """Write the card of `trainer.model` with `metrics` (`Trainer.evaluate()` or `predict(...).metrics`, on
        `split` of `dataset`; None: no evaluation) into the output folder; with `push`, push the model (this card in
        the same commit) and the tokenizer to `--hub_model_id` (default: the output folder's name). Returns the card's
        path."""
        args: Any = trainer.args
        model: Any = trainer.model
        if not trainer.is_world_process_zero():
            return None
        name = self.card_dataset or dataset
        options: dict[str, Any] = {}
        if metrics is not None:
            options["evaluation"] = evaluation_results(
                metrics, task=task, dataset=name, dataset_type=self.card_dataset_id, split=split
            )
        if self.baseline_file is not None:
            with open(self.baseline_file, encoding="utf-8") as baseline_file:
                options["baseline"] = json.load(baseline_file)
        repo_id = args.hub_model_id or os.path.basename(os.path.normpath(args.output_dir))
        path = write_model_card(args.output_dir, model, repo_id if push else str(args.output_dir), **options)
        if push:
            hub = dict(
                token=args.hub_token, private=args.hub_private_repo, revision=getattr(args, "hub_revision", None)
            )
            commit = model.push_to_hub(repo_id, card=options, **hub)
            if trainer.processing_class is not None:
                trainer.processing_class.push_to_hub(commit.repo_url.repo_id, **hub)
        return path


def _model_card(content: str) -> ModelCard:
    from huggingface_hub import ModelCard

    return ModelCard(content, ignore_metadata_errors=False)


def _checked(content: str) -> str:
    """`content` after huggingface_hub parsed its metadata as a model card's (a bad field raises here)."""
    card = _model_card(content)
    card.data.to_dict()  # model-index and the other fields re-serialise
    return content


def _existing_card(repo_id: str, *, token: str | bool | None, revision: str | None) -> ModelCard | None:
    """The ModelCard in `repo_id` at `revision` (main when that branch does not exist yet), or None."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import EntryNotFoundError, RevisionNotFoundError

    api = HfApi(token=token)
    for candidate in dict.fromkeys([revision, None]):
        try:
            if not api.file_exists(repo_id, "README.md", revision=candidate):
                return None
            path = api.hf_hub_download(repo_id, "README.md", revision=candidate)
        except (RevisionNotFoundError, EntryNotFoundError):
            continue
        return _model_card(pathlib.Path(path).read_text(encoding="utf-8"))
    return None


def _summary(class_name: str, config: Any) -> str:
    if class_name == "ElmoForPreTraining":
        return (
            "The ELMo biLM with its language-model softmax: it scores text (each direction predicts every word from "
            f"its left or right context, over a vocabulary of {config.vocab_size:,} words) and gives contextual word "
            "vectors."
        )
    labels = _label_list(config)
    if class_name == "ElmoForTokenClassification":
        return f"A tagger (token classification) on an ELMo biLM: one of {config.num_labels} tags per word ({labels})."
    if class_name == "ElmoForSequenceClassification":
        return f"A text classifier on an ELMo biLM: one of {config.num_labels} labels per text ({labels})."
    return "The ELMo biLM: contextual word vectors (feature extraction)."


def _label_list(config: Any) -> str:
    names = [str(config.id2label[index]) for index in range(config.num_labels)]
    shown = ", ".join(f"`{name}`" for name in names[:12])
    return shown + (f" and {len(names) - 12} more" if len(names) > 12 else "")


def _usage(class_name: str, config: Any, load_arguments: str, vocabulary_arguments: str) -> tuple[str, str]:
    """The usage code for `class_name` (it loads with the matching Auto class) and the notes under it."""
    auto_class = AUTO_CLASSES.get(class_name, "AutoModel")
    head = (
        "import torch\n"
        f"from transformers import {auto_class}, AutoTokenizer\n"
        + ("from transformers.utils import cached_file\n" if class_name == "ElmoForPreTraining" else "")
        + "\n"
        f"tokenizer = AutoTokenizer.from_pretrained({load_arguments})\n"
        f"model = {auto_class}.from_pretrained({load_arguments}).eval()\n\n"
    )
    layers = config.num_lstm_layers + 1
    size = config.hidden_size
    if class_name == "ElmoForTokenClassification":
        body = (
            'sentences = [["ELMo", "reads", "characters", "."], ["Any", "wörd", "works"]]\n'
            'batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")\n'
            "with torch.no_grad():\n"
            "    logits = model(**batch).logits  # (sentences, words + 2, num_labels)\n"
            "# the words' positions: not <S>, </S> or padding\n"
            "word_ids = [batch.word_ids(row) for row in range(len(sentences))]\n"
            "words = torch.tensor([[word is not None for word in row] for row in word_ids])\n"
            "tags = [[model.config.id2label[tag] for tag in row] for row in model.decode(logits, words)]\n"
        )
        notes = (
            "`tags` holds one tag per word of each sentence; `decode` runs Viterbi when the tagger has a CRF "
            "and takes the best tag of each word otherwise. With `elmo-hf` installed, "
            '`pipeline("elmo-token-classification", model=...)` tags raw text with character offsets.'
        )
    elif class_name == "ElmoForSequenceClassification":
        body = (
            'sentences = [["ELMo", "reads", "characters", "."], ["Any", "wörd", "works"]]\n'
            'batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")\n'
            "with torch.no_grad():\n"
            "    logits = model(**batch).logits  # (sentences, num_labels)\n"
            "labels = [model.config.id2label[int(label)] for label in logits.argmax(-1)]\n"
        )
        notes = "`labels` holds one label per sentence."
    elif class_name == "ElmoForPreTraining":
        body = (
            "# The softmax's words, in row order: <S>, </S>, <UNK>, then one per line\n"
            f"vocabulary_file = cached_file({vocabulary_arguments})\n"
            'with open(vocabulary_file, encoding="utf-8") as lines:\n'
            "    vocabulary = {word: index for index, word in enumerate(lines.read().splitlines())}\n"
            'unknown = vocabulary["<UNK>"]\n\n'
            'sentences = [["ELMo", "reads", "characters", "."], ["Any", "wörd", "works"]]\n'
            'batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")\n'
            'labels = torch.full(batch["attention_mask"].shape, -100)  # -100: padding, not scored\n'
            "for row, sentence in enumerate(sentences):\n"
            '    ids = [vocabulary["<S>"], *(vocabulary.get(word, unknown) for word in sentence), vocabulary["</S>"]]\n'
            "    labels[row, : len(ids)] = torch.tensor(ids)\n"
            "with torch.no_grad():\n"
            "    outputs = model(**batch, labels=labels)\n"
            "perplexity = torch.exp(outputs.loss)  # of the mean of both directions' losses\n"
            "forward_perplexity = torch.exp(outputs.forward_loss)  # left to right\n"
        )
        notes = (
            "The loss is the mean cross-entropy of predicting every word of the batch, from its left context (forward) "
            "and from its right context (backward); the words are those of the repository's `vocab.txt`, the "
            "softmax's rows (it travels with the checkpoint folder). `outputs.last_hidden_state` is the top biLSTM "
            f"layer, `(sentences, words + 2, {size})`."
        )
    else:
        body = (
            'sentences = [["ELMo", "reads", "characters", "."], ["Any", "wörd", "works"]]\n'
            'batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")\n'
            "with torch.no_grad():  # inference: no gradients, and the faster CPU path\n"
            "    outputs = model(**batch, output_hidden_states=True)\n\n"
            f"layers = outputs.hidden_states  # {layers} tensors of (sentences, words + 2, {size});"
            " <S>, </S> included\n"
            f"top = outputs.last_hidden_state  # the top biLSTM layer, (sentences, words + 2, {size})\n"
            "first_sentence = top[0, 1:-1]  # drop the <S> and </S> boundary positions\n"
        )
        notes = (
            'Padding positions (where `batch["attention_mask"]` is 0) are zero. Outputs do not depend on the\n'
            "batch: each sentence starts from a zero LSTM state."
        )
    return head + body, notes


def _fine_tuning(model: Any) -> str:
    if not getattr(model, "_head_over_a_bilm", False):
        return ""
    hub_id, name = bilm_reference(model.config)
    if hub_id is not None:
        origin = f"the biLM [`{hub_id}`](https://huggingface.co/{hub_id}) (the `base_model` of this card)"
    elif name is not None:
        origin = f"the biLM `{name}` (not a Hub repo: a model shipped with `elmo-hf`, or a local checkpoint)"
    else:
        origin = "a biLM that was not recorded"
    frozen = "kept fixed" if model.config.freeze_bilm else "fine-tuned with the head"
    return f"## Fine-tuned from\n\nThis head was trained on {origin}, whose weights were {frozen}.\n\n"


def _evaluation(evaluation: Mapping[str, Any] | None, baseline: Mapping[str, Any] | None) -> str:
    if evaluation is None:
        return ""
    dataset = evaluation["dataset"]
    where = dataset["name"] + (f", {dataset['split']} split" if dataset.get("split") else "")
    rows = [f"| this model | {name} | {value:.4g} |" for name, value in evaluation["metrics"].items()]
    if baseline:
        label = baseline.get("baseline", "baseline")
        rows += [
            f"| baseline: {label} | {name} | {value:.4g} |"
            for name, value in baseline.items()
            if name != "baseline" and isinstance(value, (int, float))
        ]
    table = "\n".join(["| model | metric | value |", "|---|---|---|", *rows])
    return f"## Evaluation\n\n{evaluation['task']} on {where}:\n\n{table}\n\n"


def _provenance(report: Mapping[str, Any] | None) -> str:
    if report is None:
        return "This checkpoint was not written by the converter; no record of its origin was given."
    return (
        f"Converted from the bilm-tf files `{report['source_options']}` and "
        f"`{report['source_weights']}` ({report['datasets_converted']} hdf5 datasets) by "
        f"`{report['converter']}` (elmo-hf {report['elmo_hf_version']}), without TensorFlow. Its key table maps "
        "every hdf5 dataset to one parameter and undoes TensorFlow's conventions there: LSTM gates reordered "
        "from (i, j, f, o) to (i, f, g, o), the forget-gate bias of 1.0 that TensorFlow adds at run time "
        "folded into the stored bias, kernels transposed, and a zero row prepended to the character "
        "embedding for padding. The conversion fails unless every dataset is used and every parameter filled."
    )


def _parity(report: Mapping[str, Any] | None) -> str:
    if report is None:
        return "Not measured for this checkpoint."
    return (
        f"Before anything was saved, every layer of the converted model was compared with a NumPy "
        f"re-implementation of bilm-tf's arithmetic run on the untouched hdf5 arrays, on "
        f"{report['verification_sentences']} sentences: the largest absolute difference was "
        f"{report['verification_max_abs_difference']:.2e} (the conversion fails above "
        f"{report['verification_atol']:g})."
    )
