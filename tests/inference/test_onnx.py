"""ONNX export (elmo_hf/inference/onnx_export.py): onnxruntime against our model on the fixture weights, with ONE file
exported from a (2, 3)-word batch and run on other batch sizes and lengths; the runner's input checks; the command."""

import numpy as np
import onnx
import pytest
import torch
from helpers import tiny_model

from elmo_hf import cli
from elmo_hf.convert.convert_bilm_tf import convert_hdf5
from elmo_hf.inference.onnx_export import ElmoOnnxModel, export_onnx

ATOL = 1e-5


@pytest.fixture(scope="module")
def fixture_export(fixtures_dir, tmp_path_factory):
    """The allennlp fixture weights converted, their tokenizer, and one ONNX export of them, run on onnxruntime."""
    folder = fixtures_dir / "allennlp_elmo"
    model, tokenizer, _ = convert_hdf5(folder / "options.json", folder / "lm_weights.hdf5")
    path = export_onnx(model.eval(), tmp_path_factory.mktemp("onnx"))
    return model, tokenizer, ElmoOnnxModel(path)


def our_layers(model, batch):
    """Every layer of ElmoModel, `(layers, batch, words, dim)`, as `elmo-hf embed` computes them."""
    with torch.no_grad():
        return torch.stack(model(**batch, output_hidden_states=True).hidden_states).numpy()


@pytest.mark.parametrize(
    "sentences",
    [
        [["The", "cat", "sat", "on", "the", "mat", "."]],
        [["A", "padded", ",", "mixed-length", "batch", "of", "three", "rows", "."], ["Short", "one"], ["Ünïcödé"]],
        [["Word"]],
    ],
    ids=["single sentence", "padded mixed-length batch", "1-word sentence"],
)
def test_onnxruntime_equals_the_model_on_fixture_weights(fixture_export, sentences):
    model, tokenizer, onnx_model = fixture_export
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    outputs = onnx_model(batch["input_ids"].numpy(), batch["attention_mask"].numpy())
    expected = our_layers(model, batch)
    assert outputs.shape == expected.shape == (3, len(sentences), max(map(len, sentences)) + 2, 32)
    np.testing.assert_allclose(outputs, expected, atol=ATOL, rtol=0)
    # Without a mask the runner derives it from the ids, as ElmoModel does.
    np.testing.assert_allclose(onnx_model(batch["input_ids"]), expected, atol=ATOL, rtol=0)


def test_one_position_without_boundaries(fixture_export):
    """A word axis of length 1, shorter than any traced or verified batch."""
    model, tokenizer, onnx_model = fixture_export
    batch = tokenizer([["Word"]], is_split_into_words=True, add_special_tokens=False, return_tensors="pt")
    assert tuple(batch["input_ids"].shape) == (1, 1, 50)
    np.testing.assert_allclose(onnx_model(batch["input_ids"]), our_layers(model, batch), atol=ATOL, rtol=0)


def test_the_file_has_dynamic_batch_and_word_axes(fixture_export):
    _, _, onnx_model = fixture_export
    inputs = {tensor.name: tensor.shape for tensor in onnx_model.session.get_inputs()}
    outputs = {tensor.name: tensor.shape for tensor in onnx_model.session.get_outputs()}
    assert inputs == {"input_ids": ["batch", "words", 50], "attention_mask": ["batch", "words"]}
    assert outputs == {"hidden_states": [3, "batch", "words", 32]}


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny_onnx")
    export_onnx(tiny_model(), directory)
    return ElmoOnnxModel(directory)


def word_ids(batch, words, chars=20):
    return np.ones((batch, words, chars), dtype=np.int64)


@pytest.mark.parametrize(
    "input_ids, attention_mask, message",
    [
        (
            word_ids(2, 3).astype(np.float32),
            None,
            "input_ids: shape (2, 3, 20) dtype float32, expected (batch, words, 20) integer character ids from "
            "ElmoTokenizer",
        ),
        (
            word_ids(2, 3, chars=50),
            None,
            "input_ids: shape (2, 3, 50) dtype int64, expected (batch, words, 20) integer character ids from "
            "ElmoTokenizer",
        ),
        (word_ids(2, 3)[0], None, "input_ids: shape (3, 20) dtype int64, expected (batch, words, 20) integer"),
        (word_ids(0, 3), None, "input_ids: shape (0, 3, 20) dtype int64, expected (batch, words, 20) integer"),
        (word_ids(2, 3) * 300, None, "input_ids: values 300..300, expected character ids in 0..261"),
        (
            word_ids(2, 3),
            np.ones((2, 4), dtype=np.int64),
            "attention_mask: shape (2, 4) dtype int64, expected (2, 3) (batch, words) of 0 and 1",
        ),
        (
            word_ids(2, 3),
            np.ones((2, 3), dtype=np.float32),
            "attention_mask: shape (2, 3) dtype float32, expected (2, 3) (batch, words) of 0 and 1",
        ),
        (
            word_ids(2, 3),
            np.full((2, 3), 2),
            "attention_mask: values other than 0 and 1, expected 1 for words and 0 for padding",
        ),
        (
            word_ids(2, 3),
            np.array([[1, 1, 1], [0, 1, 1]]),
            "attention_mask: padding before a word, expected right padding (each row's words first; tokenize with "
            "padding_side='right')",
        ),
    ],
    ids=[
        "float ids",
        "wrong characters",
        "2-D ids",
        "empty batch",
        "id out of range",
        "mask shape",
        "float mask",
        "mask values",
        "left padding",
    ],
)
def test_malformed_input_gets_a_one_line_error_naming_it(tiny_export, input_ids, attention_mask, message):
    with pytest.raises(ValueError) as error:
        tiny_export(input_ids, attention_mask)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_the_command_writes_a_working_export(tmp_path, capsys):
    model = tiny_model(seed=2)
    model.save_pretrained(tmp_path / "model")
    output = tmp_path / "exported"
    assert (
        cli.main(["export-onnx", "--model", str(tmp_path / "model"), "--output", str(output), "--opset", "18"]) is None
    )
    assert capsys.readouterr().err.endswith(f"wrote {output / 'model.onnx'}\n")
    assert onnx.load(output / "model.onnx").opset_import[0].version == 18
    assert (output / "config.json").is_file() and (output / "tokenizer_config.json").is_file()
    input_ids = np.random.default_rng(0).integers(1, 262, size=(3, 6, 20))
    expected = our_layers(model, {"input_ids": torch.from_numpy(input_ids)})
    np.testing.assert_allclose(ElmoOnnxModel(output)(input_ids), expected, atol=ATOL, rtol=0)


def test_the_command_refuses_an_unsupported_opset(tmp_path, capsys):
    tiny_model().save_pretrained(tmp_path / "model")
    with pytest.raises(SystemExit) as exit:
        cli.main(["export-onnx", "--model", str(tmp_path / "model"), "--output", str(tmp_path / "out"), "--opset", "9"])
    assert exit.value.code == 2
    assert capsys.readouterr().err.endswith("error: --opset: 9 is not supported, expected 13..20\n")
    assert not (tmp_path / "out").exists()


def test_runner_names_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="model.onnx: no such file"):
        ElmoOnnxModel(tmp_path)
