"""ELMoForManyLangs models: conversion, the compatibility Embedder, and bad input.

The truth is tests/data/efml: two small random models in ELMoForManyLangs' own on-disk layout and the outputs its
own code (0.0.4.post2, unmodified, on torch 2.13) gave for multilingual sentences, made by
tools/efml/make_efml_reference.py (see its docstring and tests/data/efml/README.json).
"""

import dataclasses
import json
import os
import random
import re
import shutil

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT, run_offline_without_repository
from transformers import AutoModel, AutoTokenizer

from elmo_hf import (
    ElmoConfig,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
    cli,
)
from elmo_hf.compat.elmoformanylangs import Embedder
from elmo_hf.convert import convert_elmoformanylangs
from elmo_hf.convert.convert_elmoformanylangs import convert_efml, read_lexicon
from elmo_hf.model.configuration_elmo import ElmoConfigFieldError

DATA = REPO_ROOT / "tests" / "data" / "efml"
SENTENCES = json.loads((DATA / "sentences.json").read_text(encoding="utf-8"))
VARIANTS = ("cnn_word", "cnn_chars")
OUTPUT_LAYERS = (-1, 0, 1, 2, -2)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Each variant converted once: {variant: checkpoint folder}."""
    root = tmp_path_factory.mktemp("efml")
    folders = {}
    for variant in VARIANTS:
        folders[variant] = root / variant
        convert_efml(DATA / variant, folders[variant])
    return folders


def reference(variant):
    return np.load(DATA / f"{variant}.npz")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("output_layer", OUTPUT_LAYERS)
def test_sents2elmo_equals_the_original(converted, variant, output_layer):
    """A fresh Embedder per call, as the reference was made (the original's first call starts from zeros)."""
    vectors = Embedder(converted[variant]).sents2elmo(SENTENCES, output_layer=output_layer)
    expected = reference(variant)
    assert len(vectors) == len(SENTENCES)
    for index, vector in enumerate(vectors):
        wanted = expected[f"layer_{output_layer}_{index}"]
        assert vector.shape == wanted.shape and vector.dtype == np.float32
        np.testing.assert_allclose(vector, wanted, rtol=0, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_stateful_calls_equal_the_original(converted, variant):
    """batch_size=2: several batches, each continuing the LSTM states of the one before, in an order shuffled by the
    global `random`; then a second call continuing the first. Same seed, same outputs as the original."""
    embedder = Embedder(converted[variant], batch_size=2)
    expected = reference(variant)
    for call in range(2):
        random.seed(7)
        vectors = embedder.sents2elmo(SENTENCES, output_layer=-2)
        for index, vector in enumerate(vectors):
            np.testing.assert_allclose(vector, expected[f"stateful_{call}_{index}"], rtol=0, atol=1e-5)
    # The carried state matters: a reset gives the fresh Embedder's first call back.
    embedder.reset_states()
    first = embedder.sents2elmo(SENTENCES[:2], output_layer=-2)
    np.testing.assert_allclose(first[0], expected["layer_-2_0"], rtol=0, atol=1e-5)
    assert not np.allclose(expected["stateful_1_0"], expected["layer_-2_0"], atol=1e-3)


def test_an_original_folder_is_converted_once_and_cached(tmp_path):
    cache = tmp_path / "cache"
    vectors = Embedder(DATA / "cnn_chars", cache_dir=cache).sents2elmo(SENTENCES[:1], output_layer=1)
    (checkpoint,) = cache.iterdir()
    assert (checkpoint / "model.safetensors").is_file()
    mtime = (checkpoint / "model.safetensors").stat().st_mtime_ns
    again = Embedder(DATA / "cnn_chars", cache_dir=cache).sents2elmo(SENTENCES[:1], output_layer=1)
    assert (checkpoint / "model.safetensors").stat().st_mtime_ns == mtime
    np.testing.assert_array_equal(vectors[0], again[0])
    np.testing.assert_allclose(vectors[0], reference("cnn_chars")["layer_1_0"], rtol=0, atol=1e-5)


def test_the_tokenizer_reproduces_the_original_rows(converted):
    """frontend.create_one_batch: [<eow>, chars..., <bow>, <pad>...] (its names swapped), ids + 1 here; a sentence
    boundary is its own entry; a long word is cut to max_characters_per_token - 2 code points for both lexicons."""
    char_ids = {token: index + 1 for token, index in read_lexicon(DATA / "cnn_word" / "char.dic").items()}
    word_ids = {token: index + 1 for token, index in read_lexicon(DATA / "cnn_word" / "word.dic").items()}
    tokenizer = AutoTokenizer.from_pretrained(converted["cnn_word"])
    assert isinstance(tokenizer, ElmoTokenizer) and tokenizer.row_width == 13
    begin, end, pad, oov = (char_ids[name] for name in ("<eow>", "<bow>", "<pad>", "<oov>"))
    rows = tokenizer(["café", "Donaudampfschifffahrt", "q🙂"], is_split_into_words=True)["input_ids"]
    assert rows[0] == [begin, char_ids["<bos>"], end, *[pad] * 9, word_ids["<bos>"]]
    assert rows[1] == [begin, *(char_ids[c] for c in "café"), end, *[pad] * 6, word_ids["café"]]
    assert rows[2] == [begin, *(char_ids.get(c, oov) for c in "Donaudampf"), end, word_ids["Donaudampf"]]
    assert rows[3] == [begin, oov, oov, end, *[pad] * 8, word_ids["<oov>"]]
    assert rows[4] == [begin, char_ids["<eos>"], end, *[pad] * 9, word_ids["<eos>"]]
    assert tokenizer.convert_ids_to_tokens(rows[1]) == "café"


def test_the_cli_checkpoint_works_with_automodel_heads_and_embed(converted, tmp_path, capsys):
    output = tmp_path / "checkpoint"
    cli.main(["convert", "--elmoformanylangs", str(DATA / "cnn_word"), "--output-dir", str(output)])
    assert "outputs match ELMoForManyLangs' arithmetic" in capsys.readouterr().err
    files = {path.name for path in output.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
        "char_lexicon.json",
        "word_lexicon.json",
    } <= files
    assert not any(name.endswith((".bin", ".pt", ".pkl")) for name in files)

    model = AutoModel.from_pretrained(output)
    tokenizer = AutoTokenizer.from_pretrained(output)
    assert isinstance(model, ElmoModel) and model.config.char_vocabulary == "lexicon"
    batch = tokenizer(SENTENCES[:3], is_split_into_words=True, padding=True, return_tensors="pt")
    tagger = ElmoForTokenClassification.from_pretrained(output, num_labels=3)
    labels = torch.where(batch["attention_mask"].bool(), 1, -100)
    assert torch.isfinite(tagger(**batch, labels=labels).loss)
    classifier = ElmoForSequenceClassification.from_pretrained(output, num_labels=2)
    assert classifier(**batch).logits.shape == (3, 2)

    (tmp_path / "input.txt").write_text("\n".join(" ".join(words) for words in SENTENCES) + "\n", encoding="utf-8")
    cli.main(["embed", str(tmp_path / "input.txt"), str(tmp_path / "vectors.npz"), "--model", str(output), "--quiet"])
    written = np.load(tmp_path / "vectors.npz")
    expected = reference("cnn_word")
    for index in range(len(SENTENCES)):
        np.testing.assert_allclose(written[str(index)], expected[f"layer_-2_{index}"], rtol=0, atol=1e-5)


def test_trust_remote_code_without_the_package(converted, tmp_path):
    """The converted checkpoint carries its code, lexicon tokenizer included."""
    code = f"""
import sys
sys.modules["elmo_hf"] = None  # any import of the package fails
import numpy as np, torch
from transformers import AutoModel, AutoTokenizer
path = {str(converted["cnn_word"])!r}
model = AutoModel.from_pretrained(path, trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
assert "elmo_hf" not in type(model).__module__ + type(tokenizer).__module__
batch = tokenizer([["Le", "café", "était", "très", "bon", "."]], is_split_into_words=True, return_tensors="pt")
with torch.no_grad():
    layers = torch.stack(model(**batch, output_hidden_states=True).hidden_states)[:, 0, 1:-1].numpy()
expected = np.load({str(DATA / "cnn_word.npz")!r})["layer_-2_0"]
difference = np.abs(layers - expected).max()
assert difference <= 1e-5, difference
print("remote code ok", type(model).__module__)
"""
    result = run_offline_without_repository(code, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "remote code ok transformers_modules" in result.stdout


# ---- bad input: one line naming the file and what was expected ----


def broken_copy(tmp_path, change):
    folder = tmp_path / "model"
    shutil.copytree(DATA / "cnn_word", folder)
    change(folder)
    return folder


def rewrite_state_dict(name, edit):
    def change(folder):
        state = torch.load(folder / name, weights_only=True)
        edit(state)
        torch.save(state, folder / name)

    return change


class NotATensor:
    """An arbitrary object in a pickle: weights_only loading must refuse to build it."""


BAD_FOLDERS = {
    "truncated weights": (
        lambda f: (f / "encoder.pkl").write_bytes((f / "encoder.pkl").read_bytes()[:500]),
        r"model/encoder\.pkl: not readable as ELMoForManyLangs' weights",
    ),
    "no config.json": (lambda f: os.remove(f / "config.json"), r"model/config\.json: no such file; expected"),
    "no char.dic": (lambda f: os.remove(f / "char.dic"), r"model/char\.dic: no such file; expected .*'token<TAB>id'"),
    "no word.dic": (lambda f: os.remove(f / "word.dic"), r"model/word\.dic: no such file"),
    "no encoder.pkl": (lambda f: os.remove(f / "encoder.pkl"), r"model/encoder\.pkl: no such file; expected .*state"),
    "no token_embedder.pkl": (
        lambda f: os.remove(f / "token_embedder.pkl"),
        r"model/token_embedder\.pkl: no such file; expected",
    ),
    "malformed lexicon line": (
        lambda f: open(f / "char.dic", "a", encoding="utf-8").write("x\ty\tz\n"),
        rf"model/char\.dic: line {len(read_lexicon(DATA / 'cnn_word' / 'char.dic')) + 1} is 'x\\ty\\tz', expected",
    ),
    "non-numeric id": (
        lambda f: open(f / "word.dic", "a", encoding="utf-8").write("word\tseven\n"),
        rf"model/word\.dic: line {len(read_lexicon(DATA / 'cnn_word' / 'word.dic')) + 1} is 'word\\tseven', expected",
    ),
    "unknown key": (
        rewrite_state_dict("encoder.pkl", lambda s: s.__setitem__("extra.weight", torch.zeros(2))),
        r"model/encoder\.pkl: unknown key 'extra\.weight'",
    ),
    "misshapen key": (
        rewrite_state_dict("token_embedder.pkl", lambda s: s.__setitem__("projection.bias", torch.zeros(9))),
        r"model/token_embedder\.pkl: key 'projection\.bias' has shape \(9,\), expected \(8,\)",
    ),
    "missing key": (
        rewrite_state_dict("encoder.pkl", lambda s: s.pop("backward_layer_1.state_projection.weight")),
        r"model/encoder\.pkl: lacks the key 'backward_layer_1\.state_projection\.weight'",
    ),
    "an object, not tensors": (
        lambda f: torch.save({"projection.bias": NotATensor()}, f / "token_embedder.pkl"),
        r"model/token_embedder\.pkl: holds objects other than tensors \(not unpickled\), expected",
    ),
    "lexicon without markers": (
        lambda f: (f / "char.dic").write_text("a\t0\nb\t1\n", encoding="utf-8"),
        r"model/char\.dic: has no entry '<bos>', expected",
    ),
}


@pytest.mark.parametrize("case", BAD_FOLDERS)
def test_bad_input_is_one_line_naming_the_file(tmp_path, capsys, case):
    change, message = BAD_FOLDERS[case]
    folder = broken_copy(tmp_path, change)
    with pytest.raises(SystemExit) as exit:
        cli.main(["convert", "--elmoformanylangs", str(folder), "--output-dir", str(tmp_path / "out")])
    assert exit.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1, error
    assert re.search(message, error), error
    assert not (tmp_path / "out").exists()


def test_verification_catches_a_wrong_key_table(monkeypatch):
    """A converter that forgot to negate the highway gate fails its own pre-save check."""
    original = convert_elmoformanylangs.efml_key_table

    def unsigned_gates(config):
        return [
            dataclasses.replace(entry, transform=lambda w: w[w.shape[0] // 2 :])
            if entry.target.endswith("gate.weight")
            else entry
            for entry in original(config)
        ]

    monkeypatch.setattr(convert_elmoformanylangs, "efml_key_table", unsigned_gates)
    with pytest.raises(ValueError, match="converted model differs from ELMoForManyLangs' arithmetic"):
        convert_efml(DATA / "cnn_word")


def test_config_fields_of_the_lexicon_mode_are_checked():
    with pytest.raises(ElmoConfigFieldError, match="num_characters must be 262"):
        ElmoConfig(num_characters=40)
    assert ElmoConfig(num_characters=40, char_vocabulary="lexicon").num_characters == 40
    with pytest.raises(ElmoConfigFieldError, match="word_embedding_vocab_size must be at least 2"):
        ElmoConfig(word_embedding_dim=5)
    with pytest.raises(ElmoConfigFieldError, match="char_vocabulary must be one of"):
        ElmoConfig(char_vocabulary="unicode")


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not a readable JSON lexicon"),
        ('{"a": 1, "b": 3}', "expected a JSON object {token: id} with the ids 1..N, each once"),
        ('["a", "b"]', "expected a JSON object {token: id}"),
    ],
)
def test_a_bad_tokenizer_lexicon_names_the_file(tmp_path, content, message):
    path = tmp_path / "char_lexicon.json"
    path.write_text(content, encoding="utf-8")
    markers = {"begin_of_word": "a", "end_of_word": "a", "padding": "a", "unknown": "a"}
    with pytest.raises(ValueError, match=re.escape(f"{path}: ") + ".*" + re.escape(message)):
        ElmoTokenizer(char_lexicon_file=str(path), char_markers=markers)


def test_a_tokenizer_lexicon_without_a_marker_names_it(tmp_path):
    path = tmp_path / "char_lexicon.json"
    path.write_text('{"a": 1, "<bos>": 2, "<eos>": 3}', encoding="utf-8")
    markers = {"begin_of_word": "a", "end_of_word": "a", "padding": "a", "unknown": "<oov>"}
    with pytest.raises(ValueError, match=re.escape(f"{path}: has no entry '<oov>'")):
        ElmoTokenizer(char_lexicon_file=str(path), char_markers=markers, bos_token="<bos>", eos_token="<eos>")
