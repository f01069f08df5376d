"""Corrupt and contradictory files: every error names the file, the key and what was expected; loading never
runs code from data (safetensors only) and never needs trust_remote_code while elmo_hf is importable."""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, tiny_model

from elmo_hf.original_tf import config_from_options, convert_hdf5, read_hdf5_weights
from elmo_hf import ElmoConfig, ElmoModel, ElmoPreTrainedModel
from transformers import AutoModel

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


def test_truncated_hdf5(source, tmp_path):
    options, weights = source
    data = weights.read_bytes()
    truncated = tmp_path / "truncated.hdf5"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError) as raised:
        convert_hdf5(options, truncated)
    message = str(raised.value)
    assert message.startswith(f"{truncated}: not a readable hdf5 weight file (Unable to synchronously open file")
    assert "truncated file" in message and message.endswith("expected bilm-tf's weights .hdf5")


@pytest.mark.parametrize("content", [b"", b"not an hdf5 file at all" * 100])
def test_corrupt_hdf5(source, tmp_path, content):
    corrupt = tmp_path / "corrupt.hdf5"
    corrupt.write_bytes(content)
    with pytest.raises(ValueError, match=f"^{corrupt}: not a readable hdf5 weight file"):
        convert_hdf5(source[0], corrupt)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda arrays: arrays.update({"CNN/W_cnn_0": np.ones((1, 1, 4, 5), np.float32)}),
            "dataset 'CNN/W_cnn_0' has shape (1, 1, 4, 5), expected (1, 1, 4, 4) for "
            "character_encoder.convolutions.0.weight",
        ),
        (
            lambda arrays: arrays.update({"char_embed": arrays["char_embed"].astype(np.int32)}),
            "dataset 'char_embed' has dtype int32, expected float for character_encoder.char_embedding",
        ),
        (
            lambda arrays: arrays["CNN_proj/b_proj"].__setitem__(3, np.nan),
            "dataset 'CNN_proj/b_proj' holds NaN or infinite values, expected finite floats",
        ),
        (
            lambda arrays: arrays.pop("RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B"),
            "dataset 'RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/B' is missing (expected shape (256,))",
        ),
        (
            lambda arrays: arrays.update({"extra/softmax": np.ones(3, np.float32)}),
            "datasets not used by this config: ['extra/softmax']",
        ),
    ],
)
def test_bad_datasets_name_file_dataset_and_expectation(source, tmp_path, change, message):
    options, weights = source
    arrays = read_hdf5_weights(weights)
    change(arrays)
    bad = write_hdf5(tmp_path / "bad.hdf5", arrays)
    with pytest.raises(ValueError) as raised:
        convert_hdf5(options, bad)
    assert str(raised.value) == f"{bad}: {message}"


def test_options_that_contradict_the_weights(source, tmp_path):
    options, weights = source
    edited = json.loads(options.read_text())
    edited["lstm"]["dim"] = 32
    path = tmp_path / "options.json"
    path.write_text(json.dumps(edited))
    with pytest.raises(ValueError) as raised:
        convert_hdf5(path, weights)
    assert str(raised.value) == (
        f"{weights}: dataset 'RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0' has shape (32, 256), expected (32, 128) "
        "for encoder.layers.0.input_weight"
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda options: options["lstm"].pop("projection_dim"), "options is missing the key 'lstm.projection_dim'"),
        (lambda options: options.pop("char_cnn"), "options is missing the key 'char_cnn'"),
        (
            lambda options: options["lstm"].update(dim="64"),
            "options 'lstm.dim': lstm_dim must be a positive int, got '64'",
        ),
        (
            lambda options: options["char_cnn"].update(filters=[[1, 4], [2, "8"]]),
            "options 'char_cnn.filters': filters[1] must be a [width, count] pair of positive ints, got [2, '8']",
        ),
        (lambda options: options.update(lstm=[64]), "options 'lstm' must be an object, got [64]"),
    ],
)
def test_bad_options_json_names_file_and_key(source, tmp_path, edit, message):
    options = json.loads(source[0].read_text())
    edit(options)
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options))
    with pytest.raises(ValueError) as raised:
        config_from_options(path)
    assert str(raised.value).startswith(f"{path}: {message}")


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
    assert result.stdout.splitlines() == ["elmo_hf.configuration_elmo elmo_hf.modeling_elmo", "[]"]
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
