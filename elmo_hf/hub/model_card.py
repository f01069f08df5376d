"""The README.md model card of an ELMo checkpoint, filled from the `model_card.md` template shipped with this
package: YAML metadata, usage code, architecture, provenance and measured parity (from the converter's
`conversion_report.json`), citation."""

import json
import os
import pathlib
import string
import tempfile

TEMPLATE_PATH = pathlib.Path(__file__).with_name("model_card.md")
CONVERSION_REPORT_NAME = "conversion_report.json"


def render_model_card(
    model,
    repo_id,
    *,
    revision=None,
    report=None,
    title=None,
    license="apache-2.0",
    language=("en",),
    datasets=(),
    tags=(),
    training_data=None,
):
    """The model card of `model` as a string.

    Args:
        model (`ElmoPreTrainedModel`): the checkpoint's model; its config gives the architecture.
        repo_id (str): what the usage code passes to `from_pretrained`: a Hub repo id or a local folder.
        revision (str, optional): the branch the usage code loads; the default branch when None.
        report (dict, optional): the converter's `conversion_report.json`; gives provenance and parity.
        title (str, optional): the card's heading; defaults to the last part of `repo_id`.
        license (str, defaults to "apache-2.0"), language (list of str, defaults to ["en"]), datasets (list of
            str, Hub dataset ids the biLM was trained on), tags (list of str, added after "elmo"): metadata.
        training_data (str, optional): a sentence on what the biLM was trained on.
    """
    config = model.config
    load_arguments = f"{json.dumps(repo_id)}, trust_remote_code=True"
    if revision is not None:
        load_arguments = f"{json.dumps(repo_id)}, revision={json.dumps(revision)}, trust_remote_code=True"
    fields = {
        "tags": json.dumps(["elmo", *[tag for tag in tags if tag != "elmo"]]),
        "license": license,
        "language": json.dumps(list(language)),
        "datasets": json.dumps(list(datasets)),
        "title": title or repo_id.rstrip("/").split("/")[-1],
        "load_arguments": load_arguments,
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
    return string.Template(TEMPLATE_PATH.read_text(encoding="utf-8")).substitute(fields)


def write_model_card(save_directory, model, repo_id, **kwargs):
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


def _provenance(report):
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


def _parity(report):
    if report is None:
        return "Not measured for this checkpoint."
    return (
        f"Before anything was saved, every layer of the converted model was compared with a NumPy "
        f"re-implementation of bilm-tf's arithmetic run on the untouched hdf5 arrays, on "
        f"{report['verification_sentences']} sentences: the largest absolute difference was "
        f"{report['verification_max_abs_difference']:.2e} (the conversion fails above "
        f"{report['verification_atol']:g})."
    )


def upload_model_card_if_missing(model, repo_id, *, token=None, private=None, revision=None):
    """Create `repo_id` when needed and, if it has no README.md yet, upload this package's card for `model`, so
    that transformers' `push_to_hub` (which keeps an existing card) publishes it instead of a generic one.
    Returns the full repo id."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    if api.file_exists(repo_id, "README.md", revision=revision):
        return repo_id
    with tempfile.TemporaryDirectory() as card_directory:
        path = write_model_card(card_directory, model, repo_id, revision=revision)
        api.upload_file(
            path_or_fileobj=path,
            path_in_repo="README.md",
            repo_id=repo_id,
            revision=revision,
            commit_message="Add the elmo-hf model card",
        )
    return repo_id
