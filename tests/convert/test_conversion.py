import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch
from helpers import REPO_ROOT, run_offline_without_repository

from conversion.convert_elmo_original_tf_to_hf import main
from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.convert import convert_bilm_tf
from elmo_hf.convert.convert_bilm_tf import convert_hdf5, read_hdf5_weights


def copy_weights(source, destination, drop=None, replace=None, add=None):
    """Write a modified copy of a bilm-tf weight file."""
    arrays = read_hdf5_weights(source)
    arrays.pop(drop, None)
    arrays.update(replace or {})
    arrays.update(add or {})
    with h5py.File(destination, "w") as weight_file:
        for name, array in arrays.items():
            weight_file.create_dataset(name, data=array)
    return destination


def test_cli_writes_a_complete_checkpoint(fixtures_dir, tmp_path):
    folder = fixtures_dir / "allennlp_elmo"
    main(
        [
            "--options",
            str(folder / "options.json"),
            "--weights",
            str(folder / "lm_weights.hdf5"),
            "--output-dir",
            str(tmp_path),
        ]
    )
    files = {path.name for path in tmp_path.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
        "modeling_elmo.py",
        "configuration_elmo.py",
        "tokenization_elmo.py",
        "conversion_report.json",
    } <= files
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in files)
    report = json.loads((tmp_path / "conversion_report.json").read_text())
    assert report["datasets_converted"] == 33 and report["verification_max_abs_difference"] < 1e-5
    model = ElmoModel.from_pretrained(tmp_path)
    assert model.config.use_skip_connections and model.config.lstm_dim == 64
    assert ElmoTokenizer.from_pretrained(tmp_path).max_characters_per_token == 50


def test_conversion_needs_no_tensorflow(fixtures_dir):
    folder = fixtures_dir / "allennlp_elmo"
    code = (
        "import sys; sys.modules['tensorflow'] = None\n"
        "from elmo_hf.convert.convert_bilm_tf import convert_hdf5\n"
        f"convert_hdf5({str(folder / 'options.json')!r}, {str(folder / 'lm_weights.hdf5')!r})\n"
    )
    subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, check=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    )


@pytest.mark.parametrize("language", ["es", "fr", "it"])
def test_multilingual_weight_files_convert_and_verify(fixtures_dir, language):
    folder = fixtures_dir / "multilingual_weights" / language
    model, tokenizer, report = convert_hdf5(folder / "options.json", folder / "weights.hdf5")
    assert report["verification_max_abs_difference"] < 1e-5
    arrays = read_hdf5_weights(folder / "weights.hdf5")
    # Spot-check the key table's transposes and the gate reorder plus forget bias on real data.
    assert np.array_equal(model.character_encoder.projection.weight.detach().numpy(), arrays["CNN_proj/W_proj"].T)
    bias = arrays["RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell/B"]
    quarter = bias.shape[0] // 4
    ours = model.encoder.layers[0].bias[1].detach().numpy()
    assert np.allclose(ours[quarter : 2 * quarter], bias[2 * quarter : 3 * quarter] + 1.0)  # forget: TF block 2
    assert np.array_equal(ours[2 * quarter : 3 * quarter], bias[quarter : 2 * quarter])  # cell input: TF block 1


def test_missing_dataset_is_named(fixtures_dir, tmp_path):
    folder = fixtures_dir / "allennlp_elmo"
    weights = copy_weights(folder / "lm_weights.hdf5", tmp_path / "w.hdf5", drop="CNN_high_1/b_carry")
    with pytest.raises(
        ValueError, match=r"w.hdf5: dataset 'CNN_high_1/b_carry' is missing \(expected shape \(124,\)\)"
    ):
        convert_hdf5(folder / "options.json", weights)


def test_misshapen_dataset_names_both_shapes(fixtures_dir, tmp_path):
    folder = fixtures_dir / "allennlp_elmo"
    name = "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0"
    weights = copy_weights(folder / "lm_weights.hdf5", tmp_path / "w.hdf5", replace={name: np.zeros((16, 64), "f4")})
    with pytest.raises(
        ValueError, match=rf"dataset '{name}' has shape \(16, 64\), expected \(64, 16\) for encoder.layers.1"
    ):
        convert_hdf5(folder / "options.json", weights)


def test_unused_dataset_is_an_error(fixtures_dir, tmp_path):
    folder = fixtures_dir / "allennlp_elmo"
    weights = copy_weights(
        folder / "lm_weights.hdf5", tmp_path / "w.hdf5", add={"CNN_high_2/W_carry": np.zeros((2, 2), "f4")}
    )
    with pytest.raises(ValueError, match=r"datasets not used by this config: \['CNN_high_2/W_carry'\]"):
        convert_hdf5(folder / "options.json", weights)


def test_options_that_contradict_the_weights(fixtures_dir):
    folder = fixtures_dir / "allennlp_elmo"
    options = json.loads((folder / "options.json").read_text())
    options["lstm"]["dim"] = 128
    with pytest.raises(
        ValueError,
        match=r"dataset 'RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0' has shape \(32, 256\), expected \(32, 512\)",
    ):
        convert_hdf5(options, folder / "lm_weights.hdf5")


def test_unreadable_weight_file(fixtures_dir, tmp_path):
    broken = tmp_path / "broken.hdf5"
    broken.write_bytes((fixtures_dir / "allennlp_elmo" / "lm_weights.hdf5").read_bytes()[:1000])
    with pytest.raises(ValueError, match="broken.hdf5: not a readable hdf5 weight file"):
        convert_hdf5(fixtures_dir / "allennlp_elmo" / "options.json", broken)


def test_verification_catches_a_wrong_key_table(fixtures_dir, monkeypatch):
    """A converter that forgot the forget bias fails its own pre-save check."""
    monkeypatch.setattr(convert_bilm_tf, "_add_forget_bias", lambda bias: bias)
    folder = fixtures_dir / "allennlp_elmo"
    with pytest.raises(ValueError, match="converted model differs from bilm-tf's arithmetic"):
        convert_bilm_tf.convert_hdf5(folder / "options.json", folder / "lm_weights.hdf5")


def test_trust_remote_code_without_the_package(fixtures_dir, tmp_path):
    """A converted checkpoint carries its code: it loads in a process where elmo_hf cannot be imported."""
    folder = fixtures_dir / "allennlp_elmo"
    model, tokenizer, _ = convert_hdf5(folder / "options.json", folder / "lm_weights.hdf5", tmp_path / "elmo")
    batch = tokenizer([["Remote", "code", "works", "."]], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).last_hidden_state.numpy()
    np.save(tmp_path / "expected.npy", expected)
    code = f"""
import sys
sys.modules["elmo_hf"] = None  # any import of the package fails
import numpy as np, torch
from transformers import AutoModel, AutoTokenizer
path = {str(tmp_path / "elmo")!r}
model = AutoModel.from_pretrained(path, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
assert "elmo_hf" not in type(model).__module__, type(model).__module__
batch = tokenizer([["Remote", "code", "works", "."]], is_split_into_words=True, return_tensors="pt")
with torch.no_grad():
    output = model(**batch).last_hidden_state.numpy()
difference = np.abs(output - np.load({str(tmp_path / "expected.npy")!r})).max()
assert difference <= 1e-6, difference  # same weights; BLAS may differ in the last bit across processes
print("remote code ok", type(model).__module__)
"""
    result = run_offline_without_repository(code, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "remote code ok transformers_modules" in result.stdout
