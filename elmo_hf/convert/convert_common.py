"""What every converter shares: a key table's entries, filling `ElmoModel`'s parameters from source arrays by such a
table (every source array used, every parameter filled, shapes checked), the check of the converted model against a
re-implementation of the source's own arithmetic, and writing or uploading the result.

The converters by source: `convert_bilm_tf.py` (bilm-tf's options.json, hdf5 weights and training checkpoints) and
`convert_elmoformanylangs.py` (ELMoForManyLangs model folders). Each gives its key table and its reference
arithmetic, in NumPy on the untouched source arrays; this module runs the rest the same way for both.
"""

import contextlib
import errno
import inspect
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..hub.model_card import CONVERSION_REPORT_NAME
from ..model.modeling_elmo import ElmoModel
from ..user_errors import UnwritableOutputError, UserInputError

# A converted model's layers must match the source's arithmetic within this, on every sentence, before it is saved.
VERIFY_ATOL = 1e-5


@dataclass(frozen=True)
class KeyTableEntry:
    source: str  # the source array's name (an hdf5 dataset, a state dict's "file/key")
    source_shape: tuple  # its expected shape
    target: str  # parameter name in ElmoModel
    direction: int | None  # for the stacked LSTM parameters: 0 = forward, 1 = backward
    transform: Callable[[np.ndarray], np.ndarray]  # the source's layout -> ours


def sigmoid(x):
    """The logistic function on a NumPy array, for the reference arithmetic."""
    return 1.0 / (1.0 + np.exp(-x))


def convert_weights(arrays, config, key_table, source_name="weights"):
    """The ElmoModel state dict built from `arrays` ({name: array}) by `key_table`, checking that every source array
    is used and every parameter filled with the expected shapes."""
    reference = ElmoModel(config).state_dict()
    state_dict = {name: torch.empty_like(tensor) for name, tensor in reference.items()}
    filled = {name: set() for name in reference}
    for entry in key_table:
        if entry.source not in arrays:
            raise UserInputError(
                f"{source_name}: dataset '{entry.source}' is missing (expected shape {entry.source_shape})"
            )
        array = arrays[entry.source]
        if tuple(array.shape) != entry.source_shape:
            raise UserInputError(
                f"{source_name}: dataset '{entry.source}' has shape {tuple(array.shape)}, "
                f"expected {entry.source_shape} for {entry.target}"
            )
        if not np.issubdtype(array.dtype, np.floating):
            raise UserInputError(
                f"{source_name}: dataset '{entry.source}' has dtype {array.dtype}, expected float for {entry.target}"
            )
        if not np.isfinite(array).all():
            raise UserInputError(
                f"{source_name}: dataset '{entry.source}' holds NaN or infinite values, expected finite floats"
            )
        value = torch.from_numpy(np.ascontiguousarray(entry.transform(array.astype(np.float32))))
        target = state_dict[entry.target] if entry.direction is None else state_dict[entry.target][entry.direction]
        if value.shape != target.shape:
            raise ValueError(f"key table bug: {entry.source} gives {tuple(value.shape)} for {entry.target}")
        target.copy_(value)
        filled[entry.target].add(entry.direction)
    unused = sorted(set(arrays) - {entry.source for entry in key_table})
    if unused:
        raise UserInputError(f"{source_name}: datasets not used by this config: {unused}")
    for name, directions in filled.items():
        needed = {0, 1} if name.startswith("encoder.") else {None}  # stacked LSTM parameters: both directions
        if directions != needed:
            raise ValueError(f"no source dataset fills parameter {name}")
    return state_dict


def build_model(config, state_dict):
    """An `ElmoModel` in eval mode holding exactly `state_dict`."""
    model = ElmoModel(config)
    model.load_state_dict(state_dict, strict=True)
    return model.eval()


def verify_against_reference(model, tokenizer, reference_layers, sentences, source, atol=VERIFY_ATOL):
    r"""
    Raises unless the model's layers match the source's own arithmetic on every sentence.

    Args:
        model (`ElmoModel`): the converted model.
        tokenizer (`ElmoTokenizer`): the converted tokenizer; it encodes `sentences`.
        reference_layers (callable): one sentence's `input_ids` `(words, chars)`, boundaries included and no
            padding -> its layers `(num_lstm_layers + 1, words, 2 * projection_dim)` as the source computes them.
        sentences (list of lists of str): the words of each test sentence.
        source (str): whose arithmetic it is, for the error: "bilm-tf's", "ELMoForManyLangs'".
        atol (float): the largest difference allowed.

    Returns:
        float: the largest absolute difference over all sentences.
    """
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        layers = model(**batch, output_hidden_states=True).hidden_states
    ours = torch.stack(layers, dim=1).numpy()  # (batch, layers, words, 2 * proj)
    worst = 0.0
    for row, length in enumerate(batch["attention_mask"].sum(1).tolist()):
        expected = reference_layers(batch["input_ids"][row, :length].numpy())
        difference = float(np.abs(ours[row, :, :length] - expected).max())
        worst = max(worst, difference)
        if not np.allclose(ours[row, :, :length], expected, atol=atol):
            raise ValueError(f"converted model differs from {source} arithmetic by {difference:.3g} (sentence {row})")
    return worst


def save(model, tokenizer, output_dir, report):
    """Writes the model (config.json, model.safetensors and the modeling code), the tokenizer and the conversion
    report (`conversion_report.json`) into `output_dir`, created if needed."""
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    with open(os.path.join(output_dir, CONVERSION_REPORT_NAME), "w", encoding="utf-8") as report_file:
        json.dump(report, report_file, indent=2)


def checkpoint_bytes(model):
    """About the bytes `save` writes for `model`: its weights, and the code files `save_pretrained` copies."""
    from transformers.dynamic_module_utils import get_relative_import_files

    model_file = inspect.getfile(type(model))
    code = {model_file, *get_relative_import_files(model_file)}
    weights = sum(tensor.numel() * tensor.element_size() for tensor in model.state_dict().values())
    return weights + sum(os.path.getsize(path) for path in code)


@contextlib.contextmanager
def written_whole(output_dir, needed=None):
    r"""
    A folder output that appears whole or not at all: yields a temporary sibling of `output_dir` to write into, and
    moves what was written there into `output_dir` (created, with its parents, when missing) once the block ends.

    A new folder is one rename. Into an existing folder, each file is renamed into place (replacing a file of the
    same name; other files stay). On any error or interrupt inside the block the temporary folder is removed and
    `output_dir` is left as it was; an OSError (a full disk, a read-only folder, a permission denial; also the
    safetensors writer's own error for one) becomes an `UnwritableOutputError` for `output_dir`, with `needed`
    (bytes, an estimate) for a full disk.
    """
    output_dir = os.path.abspath(output_dir)
    try:
        os.makedirs(os.path.dirname(output_dir), exist_ok=True)
        parent, name = os.path.split(output_dir)
        temporary = tempfile.mkdtemp(prefix=f".{name}.", suffix=".incomplete", dir=parent)
    except OSError as error:
        raise UnwritableOutputError(output_dir, error, needed) from error
    try:
        try:
            yield temporary
        except Exception as error:
            fault = _os_error(error)
            if fault is None or isinstance(error, UnwritableOutputError):
                raise
            raise UnwritableOutputError(output_dir, fault, needed) from error
        try:
            _move_into_place(temporary, output_dir)
        except OSError as error:
            raise UnwritableOutputError(output_dir, error) from error
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _os_error(error):
    """`error` as an OSError: itself, or the one a safetensors writer reports in words ("... (os error 28)")."""
    if isinstance(error, OSError):
        return error
    if type(error).__name__ == "SafetensorError":
        match = re.search(r"os error (\d+)", str(error))
        if match:
            code = int(match.group(1))
            return OSError(code, os.strerror(code))
    return None


def _move_into_place(temporary, output_dir):
    """Rename the folder `temporary` to `output_dir`, or, when that exists and holds files, each of its files."""
    try:
        os.rename(temporary, output_dir)  # also replaces an empty folder
        return
    except OSError as error:
        if error.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not os.path.isdir(output_dir):
            raise
    for name in sorted(os.listdir(temporary)):
        target = os.path.join(output_dir, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        os.replace(os.path.join(temporary, name), target)


def push_to_hub(output_dir, repo_id, private=None, revision=None):
    """Upload the converted checkpoint folder to the Hub repo `repo_id` (created when missing) in one commit,
    on branch `revision` (created from main when missing). Returns the huggingface_hub `CommitInfo`."""
    from huggingface_hub import HfApi

    api = HfApi()
    api.create_repo(repo_id, private=private, exist_ok=True)
    if revision is not None:
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    with open(os.path.join(output_dir, CONVERSION_REPORT_NAME), encoding="utf-8") as report_file:
        source = json.load(report_file)["source_weights"]
    return api.upload_folder(
        repo_id=repo_id, folder_path=output_dir, revision=revision, commit_message=f"Convert {source} with elmo-hf"
    )


def check_repo_id(repo_id):
    """`repo_id` must name its namespace: the model card's usage code loads it by this exact name."""
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise UserInputError(f"--push-to-hub: takes a repo id of the form namespace/name, got {repo_id!r}")
    return repo_id
