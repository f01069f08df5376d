"""Corrupt and contradictory files: every error names the file, the key and what was expected; loading never
runs code from data (safetensors only) and never needs trust_remote_code while elmo_hf is importable."""

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from helpers import REPO_ROOT, tiny_model
from transformers import AutoModel

from elmo_hf import ElmoModel, ElmoPreTrainedModel
from elmo_hf.convert.convert_bilm_tf import config_from_options, convert_hdf5, read_hdf5_weights
from elmo_hf.user_errors import UserInputError

# ---- bilm-tf hdf5 weights and options.json (the converter) ----


@pytest.fixture
def source(fixtures_dir):
    folder = fixtures_dir / "allennlp_elmo"
    return folder / "options.json", folder / "lm_weights.hdf5"


def write_hdf5(path, arrays):
    with h5py.File(path, "w") as weight_file:
        for name, array in arrays.items():
            weight_file[name] = array
    return path


# Each case: (a change to the weight file's {dataset name: array}, the message after "<weights file>: ").
BAD_DATASETS = {
    "misshapen": (
        lambda arrays: arrays.update({"CNN/W_cnn_0": np.ones((1, 1, 4, 5), np.float32)}),
        "dataset 'CNN/W_cnn_0' has shape (1, 1, 4, 5), expected (1, 1, 4, 4) for "
        "character_encoder.convolutions.0.weight",
    ),
    "integer": (
        lambda arrays: arrays.update({"char_embed": arrays["char_embed"].astype(np.int32)}),
        "dataset 'char_embed' has dtype int32, expected float for character_encoder.char_embedding",
    ),
    "nan": (
        lambda arrays: arrays["CNN_proj/b_proj"].__setitem__(3, np.nan),
        "dataset 'CNN_proj/b_proj' holds NaN or infinite values, expected finite floats",
    ),
    "missing": (
        lambda arrays: arrays.pop("RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B"),
        "dataset 'RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B' is missing (expected shape (256,))",
    ),
    "unused": (
        lambda arrays: arrays.update({"extra/softmax": np.ones(3, np.float32)}),
        "datasets not used by this config: ['extra/softmax']",
    ),
}

# Each case: (an edit of the parsed options.json, the message after "<options file>: ").
BAD_OPTIONS = {
    "missing key": (
        lambda options: options["lstm"].pop("projection_dim"),
        "options is missing the key 'lstm.projection_dim'",
    ),
    "missing section": (lambda options: options.pop("char_cnn"), "options is missing the key 'char_cnn'"),
    "wrong type": (
        lambda options: options["lstm"].update(dim="64"),
        "options 'lstm.dim': lstm_dim must be a positive int, got '64'",
    ),
    "wrong filter type": (
        lambda options: options["char_cnn"].update(filters=[[1, 4], [2, "8"]]),
        "options 'char_cnn.filters': filters[1] must be a [width, count] pair of positive ints, got [2, '8']",
    ),
    "section not an object": (lambda options: options.update(lstm=[64]), "options 'lstm' must be an object, got [64]"),
}


def weights_with(source, tmp_path, case):
    """(options, a copy of the weights with BAD_DATASETS[case] applied, the expected message)."""
    options, weights = source
    arrays = read_hdf5_weights(weights)
    change, message = BAD_DATASETS[case]
    change(arrays)
    bad = write_hdf5(tmp_path / "bad.hdf5", arrays)
    return options, bad, f"{bad}: {message}"


def options_with(source, tmp_path, case):
    """(a copy of options.json with BAD_OPTIONS[case] applied, the weights, the expected message)."""
    options = json.loads(source[0].read_text())
    edit, message = BAD_OPTIONS[case]
    edit(options)
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options))
    return path, source[1], f"{path}: {message}"


def truncated_weights(source, tmp_path):
    """(options, the first half of the weight file, the start of the expected message)."""
    options, weights = source
    data = weights.read_bytes()
    truncated = tmp_path / "truncated.hdf5"
    truncated.write_bytes(data[: len(data) // 2])
    return options, truncated, f"{truncated}: not a readable hdf5 weight file (Unable to synchronously open file"


def options_contradicting_the_weights(source, tmp_path):
    """(options.json with an LSTM of 32 cells, weights of 64, the expected message: it names the weights)."""
    options, weights = source
    edited = json.loads(options.read_text())
    edited["lstm"]["dim"] = 32
    path = tmp_path / "options.json"
    path.write_text(json.dumps(edited))
    message = (
        f"{weights}: dataset 'RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0' has shape (32, 256), expected (32, 128) "
        "for encoder.layers.0.input_weight"
    )
    return path, weights, message


def test_truncated_hdf5(source, tmp_path):
    options, truncated, start = truncated_weights(source, tmp_path)
    with pytest.raises(ValueError) as raised:
        convert_hdf5(options, truncated)
    message = str(raised.value)
    assert message.startswith(start)
    assert "truncated file" in message and message.endswith("expected bilm-tf's weights .hdf5")


@pytest.mark.parametrize("content", [b"", b"not an hdf5 file at all" * 100])
def test_corrupt_hdf5(source, tmp_path, content):
    corrupt = tmp_path / "corrupt.hdf5"
    corrupt.write_bytes(content)
    with pytest.raises(ValueError, match=f"^{corrupt}: not a readable hdf5 weight file"):
        convert_hdf5(source[0], corrupt)


@pytest.mark.parametrize("case", BAD_DATASETS)
def test_bad_datasets_name_file_dataset_and_expectation(source, tmp_path, case):
    options, bad, message = weights_with(source, tmp_path, case)
    with pytest.raises(UserInputError) as raised:
        convert_hdf5(options, bad)
    assert str(raised.value) == message


def test_options_that_contradict_the_weights(source, tmp_path):
    options, weights, message = options_contradicting_the_weights(source, tmp_path)
    with pytest.raises(UserInputError) as raised:
        convert_hdf5(options, weights)
    assert str(raised.value) == message


@pytest.mark.parametrize("case", BAD_OPTIONS)
def test_bad_options_json_names_file_and_key(source, tmp_path, case):
    path, _, message = options_with(source, tmp_path, case)
    with pytest.raises(UserInputError) as raised:
        config_from_options(path)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"lstm": {"dim": 64,', "not valid JSON (Expecting property name enclosed in double quotes"),
        ("[1, 2]", "options must be a JSON object, got list"),
    ],
)
def test_options_json_that_is_not_an_object(tmp_path, content, message):
    path = tmp_path / "options.json"
    path.write_text(content)
    with pytest.raises(ValueError) as raised:
        config_from_options(path)
    assert str(raised.value).startswith(f"{path}: {message}")


# ---- The same files through the command line: one line, no traceback ----

ELMO_HF = [str(Path(sys.executable).with_name("elmo-hf"))]  # the console script of this environment
CONVERSION_SCRIPT = [sys.executable, str(REPO_ROOT / "conversion" / "convert_elmo_original_tf_to_hf.py")]


def convert_command(command, build):
    """A case: `command convert` on the (options, weights) that `build(source, tmp_path)` writes."""

    def case(source, tmp_path):
        options, weights, message = build(source, tmp_path)
        arguments = ["--options", str(options), "--weights", str(weights), "--output-dir", str(tmp_path / "out")]
        return [*command, *arguments], message

    return case


def missing_embed_input(source, tmp_path):
    missing = tmp_path / "no_such_input.txt"
    return [*ELMO_HF, "embed", str(missing), str(tmp_path / "vectors.npz")], (
        f"{missing}: no such file; expected UTF-8 text, one sentence per line"
    )


def missing_perplexity_text(source, tmp_path):
    missing = tmp_path / "no_such_text.txt"
    return [*ELMO_HF, "perplexity", "--text", str(missing)], (
        f"{missing}: cannot be read (No such file or directory); expected UTF-8 text, one sentence per line"
    )


def missing_perplexity_model(source, tmp_path):
    (tmp_path / "text.txt").write_text("the cat sat\n", encoding="utf-8")
    missing = tmp_path / "no_such_model"
    return [*ELMO_HF, "perplexity", "--model", str(missing), "--text", str(tmp_path / "text.txt")], (
        f"{missing}: no such folder, and no such model on the Hub ("
    )


def missing_options_file(source, tmp_path):
    missing = tmp_path / "no_such_options.json"
    return convert_command(
        ELMO_HF + ["convert"],
        lambda source, tmp_path: (
            missing,
            source[1],
            (f"{missing}: cannot be read (No such file or directory); expected bilm-tf's options.json"),
        ),
    )(source, tmp_path)


def bad_conll_line(source, tmp_path):
    conll = tmp_path / "train.conll"
    conll.write_text("Paris B-LOC\nword\n", encoding="utf-8")
    script = REPO_ROOT / "examples" / "run_token_classification.py"
    return [sys.executable, str(script), "--train_file", str(conll), "--output_dir", str(tmp_path / "out")], (
        f"{conll}:2: expected a word and a tag, got 'word'"
    )


COMMAND_LINE_CASES = {
    "missing dataset (elmo-hf convert)": convert_command(
        ELMO_HF + ["convert"], lambda source, tmp_path: weights_with(source, tmp_path, "missing")
    ),
    "misshapen dataset (script)": convert_command(
        CONVERSION_SCRIPT, lambda source, tmp_path: weights_with(source, tmp_path, "misshapen")
    ),
    "truncated hdf5 (elmo-hf convert)": convert_command(ELMO_HF + ["convert"], truncated_weights),
    "options missing a key (script)": convert_command(
        CONVERSION_SCRIPT, lambda source, tmp_path: options_with(source, tmp_path, "missing key")
    ),
    "options with a wrong type (elmo-hf convert)": convert_command(
        ELMO_HF + ["convert"], lambda source, tmp_path: options_with(source, tmp_path, "wrong type")
    ),
    "options contradicting the weights (script)": convert_command(CONVERSION_SCRIPT, options_contradicting_the_weights),
    "missing options file (elmo-hf convert)": missing_options_file,
    "missing input (elmo-hf embed)": missing_embed_input,
    "missing text (elmo-hf perplexity)": missing_perplexity_text,
    "missing model (elmo-hf perplexity)": missing_perplexity_model,
    "bad data line (examples/run_token_classification.py)": bad_conll_line,
}


def run_command_line(command, tmp_path):
    environment = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("case", COMMAND_LINE_CASES)
def test_command_line_reports_a_bad_file_in_one_line(source, tmp_path, case):
    command, message = COMMAND_LINE_CASES[case](source, tmp_path)
    done = run_command_line(command, tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "Traceback" not in output, output
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    # The message names the file and the key (dataset, options key) and says what was expected.
    assert errors[0].startswith(f"error: {message}"), output
    assert done.stderr.rstrip("\n").endswith(errors[0]), output  # the last thing printed


def test_debug_shows_the_traceback_of_a_bad_file(source, tmp_path):
    command, message = COMMAND_LINE_CASES["missing dataset (elmo-hf convert)"](source, tmp_path)
    done = run_command_line([*command, "--debug"], tmp_path)
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert done.stderr.rstrip("\n").endswith(f"elmo_hf.user_errors.UserInputError: {message}")


# ---- Hugging Face checkpoints (from_pretrained) ----


@pytest.fixture
def checkpoint(tmp_path):
    folder = tmp_path / "checkpoint"
    tiny_model().save_pretrained(folder)
    return folder


def test_saved_checkpoint_holds_no_pickle(checkpoint):
    files = os.listdir(checkpoint)
    assert "model.safetensors" in files
    assert not [name for name in files if name.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]


@pytest.mark.parametrize(
    "cut, detail",
    [
        (lambda data: data[: len(data) // 2], "Error while deserializing header: incomplete metadata"),
        (lambda data: data[:5], "Error while deserializing header: "),
        (lambda data: b"\xff" * 64, "Error while deserializing header: "),
    ],
)
def test_corrupt_safetensors(checkpoint, cut, detail):
    weights = checkpoint / "model.safetensors"
    weights.write_bytes(cut(weights.read_bytes()))
    with pytest.raises(OSError) as raised:
        ElmoModel.from_pretrained(checkpoint)
    message = str(raised.value)
    assert message.startswith(f"{checkpoint}: the weights are not a readable safetensors file ({detail}")
    assert message.endswith("expected model.safetensors as written by save_pretrained")


def edit_config(checkpoint, **changes):
    path = checkpoint / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"lstm_dim": 32},
            "'encoder.layers.0.bias' has shape (2, 64) in the weights, but the config expects (2, 128) "
            "(check lstm_dim, projection_dim, num_lstm_layers)",
        ),
        (
            {"filters": [[1, 4], [2, 8], [3, 16]]},
            "'character_encoder.convolutions.2.bias' has shape (8,) in the weights, but the config expects (16,) "
            "(check filters, char_embedding_dim)",
        ),
        (
            {"char_embedding_dim": 6},
            "'character_encoder.char_embedding' has shape (262, 4) in the weights, but the config expects "
            "(262, 6) (check char_embedding_dim)",
        ),
        (
            {"num_lstm_layers": 3},
            "the weights lack 'encoder.layers.2.bias' (expected shape (2, 64); check lstm_dim, projection_dim, "
            "num_lstm_layers)",
        ),
        (
            {"num_lstm_layers": 1},
            "the weights hold 'encoder.layers.1.bias', which the config has no place for (check lstm_dim, "
            "projection_dim, num_lstm_layers)",
        ),
        (
            {"num_highway_layers": 0},
            "the weights hold 'character_encoder.highways.0.gate.bias', which the config has no place for "
            "(check filters, num_highway_layers)",
        ),
    ],
)
def test_config_edited_after_save_contradicts_the_weights(checkpoint, changes, message):
    edit_config(checkpoint, **changes)
    for load in (ElmoModel.from_pretrained, AutoModel.from_pretrained):
        with pytest.raises(ValueError) as raised:
            load(checkpoint)
        assert str(raised.value) == f"{checkpoint}: config.json contradicts model.safetensors: {message}"


def test_ignore_mismatched_sizes_does_not_excuse_elmo_parameters(checkpoint):
    edit_config(checkpoint, lstm_dim=32)
    with pytest.raises(ValueError, match="config.json contradicts model.safetensors: 'encoder.layers.0.bias'"):
        ElmoModel.from_pretrained(checkpoint, ignore_mismatched_sizes=True)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"lstm_dim": "16"}, "lstm_dim must be a positive int, got '16'"),
        ({"filters": [[1, 4], [2]]}, "filters[1] must be a [width, count] pair of positive ints, got [2]"),
        ({"num_characters": 300}, "num_characters must be 262 (fixed by the character-id scheme), got 300"),
    ],
)
def test_config_json_with_wrong_values_names_the_field(checkpoint, changes, message):
    # transformers reads config.json before any ELMo code runs, so the message names the field, not the file.
    edit_config(checkpoint, **changes)
    with pytest.raises(ValueError) as raised:
        AutoModel.from_pretrained(checkpoint)
    assert str(raised.value) == message


def test_config_json_that_is_not_json(checkpoint):
    (checkpoint / "config.json").write_text('{"lstm_dim": ')
    with pytest.raises(OSError, match=f"the config file at '{checkpoint / 'config.json'}' is not a valid JSON file"):
        AutoModel.from_pretrained(checkpoint)


def test_loading_info_is_still_returned_on_request(checkpoint):
    model, info = ElmoModel.from_pretrained(checkpoint, output_loading_info=True)
    assert isinstance(model, ElmoModel)
    assert (info["missing_keys"], info["unexpected_keys"], info["mismatched_keys"]) == (set(), set(), set())


class _WritesAFileWhenUnpickled:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def write_malicious_pickle(path, marker):
    with open(path, "wb") as pickle_file:
        pickle.dump(_WritesAFileWhenUnpickled(marker), pickle_file)
    # Prove the payload works: unpickling it does create the marker.
    with open(path, "rb") as pickle_file:
        pickle.load(pickle_file).close()
    assert marker.exists()
    marker.unlink()


def test_a_pickle_only_checkpoint_is_refused_unread(checkpoint, tmp_path):
    marker = tmp_path / "code_ran"
    (checkpoint / "model.safetensors").unlink()
    write_malicious_pickle(checkpoint / "pytorch_model.bin", marker)
    for load in (ElmoModel.from_pretrained, AutoModel.from_pretrained):
        with pytest.raises(OSError, match=f"no file named model.safetensors found in directory {checkpoint}"):
            load(checkpoint)
    with pytest.raises(ValueError, match="ELMo checkpoints load from safetensors only"):
        ElmoModel.from_pretrained(checkpoint, use_safetensors=False)
    assert not marker.exists()


def test_a_pickle_next_to_safetensors_is_ignored(checkpoint, tmp_path):
    marker = tmp_path / "code_ran"
    write_malicious_pickle(checkpoint / "pytorch_model.bin", marker)
    loaded = AutoModel.from_pretrained(checkpoint)
    expected = tiny_model().state_dict()
    assert all(torch.equal(tensor, expected[name]) for name, tensor in loaded.state_dict().items())
    assert not marker.exists()


def test_no_remote_code_is_needed_or_run_when_elmo_hf_is_importable(checkpoint, tmp_path):
    # The checkpoint's own copies of the code are removed: the classes must come from the elmo_hf package.
    (checkpoint / "modeling_elmo.py").unlink()
    (checkpoint / "configuration_elmo.py").unlink()
    modules_cache = tmp_path / "modules_cache"
    script = textwrap.dedent(
        f"""
        import sys
        import elmo_hf
        from transformers import AutoConfig, AutoModel
        config = AutoConfig.from_pretrained({str(checkpoint)!r})
        model = AutoModel.from_pretrained({str(checkpoint)!r})
        print(type(config).__module__, type(model).__module__)
        print(sorted(name for name in sys.modules if "transformers_modules" in name))
        """
    )
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HF_MODULES_CACHE=str(modules_cache), HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["elmo_hf.model.configuration_elmo elmo_hf.model.modeling_elmo", "[]"]
    assert not modules_cache.exists() or not any(modules_cache.rglob("*.py"))


class _ElmoWithHead(ElmoPreTrainedModel):
    """A head as the heads in elmo_hf are built: it contains the base model."""

    def __init__(self, config):
        super().__init__(config)
        self.elmo = ElmoModel(config)
        self.classifier = torch.nn.Linear(config.hidden_size, 3)
        self.post_init()


def test_heads_load_from_a_base_checkpoint_but_not_from_a_contradicting_one(checkpoint, tmp_path):
    head = _ElmoWithHead.from_pretrained(checkpoint)  # the new classifier may be missing from the file
    assert torch.equal(head.elmo.encoder.layers[0].bias, tiny_model().encoder.layers[0].bias)
    head.save_pretrained(tmp_path / "head")
    edit_config(tmp_path / "head", lstm_dim=32)
    with pytest.raises(ValueError, match="config.json contradicts model.safetensors: 'elmo.encoder.layers.0.bias'"):
        _ElmoWithHead.from_pretrained(tmp_path / "head", ignore_mismatched_sizes=True)
