"""The `elmo-hf` command line: embed, convert and perplexity."""

import json
import shutil

import numpy as np
import pytest
from helpers import ATOL, SENTENCES, direct_layers, read_output, tiny_model, write_lines

from elmo_hf import DEFAULT_MODEL, ElmoEmbedder, ElmoModel, cli
from elmo_hf.inference import perplexity

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny_elmo")
    tiny_model(seed=3).save_pretrained(directory)
    return directory


def test_embed_writes_what_the_python_api_returns(model_dir, tmp_path, capsys):
    write_lines(tmp_path / "input.txt", SENTENCES)
    output = tmp_path / "vectors.npz"
    cli.main(
        ["embed", str(tmp_path / "input.txt"), str(output), "--model", str(model_dir), "--layers", "mix"]
        + ["--mix-weights", "0.2", "0.3", "0.5", "--sentence-vectors", "--batch-size", "2", "--device", "cpu"]
    )
    assert "embedded 5 sentences (25 tokens) in" in capsys.readouterr().err
    arrays, sentence_to_index = read_output(output)
    expected = ElmoEmbedder.from_pretrained(model_dir).embed_sentences(
        SENTENCES, layers="mix", mix_weights=[0.2, 0.3, 0.5], sentence_vectors=True
    )
    for index, vector in enumerate(expected):
        np.testing.assert_allclose(arrays[str(index)], vector, atol=ATOL, rtol=0)
    assert sentence_to_index["Hello"] == "1"


def test_embed_creates_the_output_folders(model_dir, tmp_path):
    """A fresh clone has no outputs/ folder (it is git-ignored): the README's main command must create it."""
    write_lines(tmp_path / "input.txt", SENTENCES)
    output = tmp_path / "outputs" / "nested" / "vectors.hdf5"
    cli.main(["embed", str(tmp_path / "input.txt"), str(output), "--model", str(model_dir), "--quiet"])
    arrays, _ = read_output(output)
    assert len(arrays) == len(SENTENCES)
    assert sorted(path.name for path in output.parent.iterdir()) == ["vectors.hdf5"]  # no .partial left behind


def test_token_cache_option_gives_the_same_file(model_dir, tmp_path):
    write_lines(tmp_path / "input.txt", SENTENCES)
    (tmp_path / "vocab.txt").write_text("The\ncat\n.\nHello\n\nsleep\n", encoding="utf-8")
    command = ["embed", str(tmp_path / "input.txt"), "--model", str(model_dir), "--quiet"]
    cli.main([*command[:2], str(tmp_path / "plain.hdf5"), *command[2:]])
    cli.main([*command[:2], str(tmp_path / "cached.hdf5"), *command[2:], "--token-cache", str(tmp_path / "vocab.txt")])
    plain, _ = read_output(tmp_path / "plain.hdf5")
    cached, _ = read_output(tmp_path / "cached.hdf5")
    for key in plain:
        np.testing.assert_allclose(cached[key], plain[key], atol=ATOL, rtol=0)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--layers", "mix"], "error: mix_weights go with layers='mix' and only with it"),
        (["--chunk-size", "0"], "error: chunk_size must be a positive int, got 0"),
    ],
)
def test_bad_options_give_a_message_and_exit_code_2(model_dir, tmp_path, capsys, extra, message):
    write_lines(tmp_path / "input.txt", SENTENCES)
    with pytest.raises(SystemExit) as exit:
        cli.main(["embed", str(tmp_path / "input.txt"), str(tmp_path / "out.npz"), "--model", str(model_dir), *extra])
    assert exit.value.code == 2
    assert capsys.readouterr().err.startswith(message)


def test_help_lists_the_commands_and_model_defaults_to_the_shipped_one(capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["--help"])
    assert exit.value.code == 0
    text = capsys.readouterr().out
    assert all(command in text for command in ("embed", "convert", "perplexity"))
    assert cli.build_parser().parse_args(["embed", "in.txt", "out.hdf5"]).model == DEFAULT_MODEL


def test_convert_then_embed_a_real_checkpoint(fixtures_dir, tmp_path, capsys):
    folder = fixtures_dir / "allennlp_elmo"
    with pytest.raises(SystemExit) as exit:
        cli.main(["convert", "--help"])
    assert exit.value.code == 0 and "usage: elmo-hf convert" in capsys.readouterr().out
    checkpoint = tmp_path / "checkpoint"
    cli.main(
        ["convert", "--options", str(folder / "options.json"), "--weights", str(folder / "lm_weights.hdf5")]
        + ["--output-dir", str(checkpoint)]
    )
    sentences = [sentence.split() for sentence in json.loads((folder / "sentences.json").read_text())[0]]
    write_lines(tmp_path / "input.txt", sentences)
    cli.main(["embed", str(tmp_path / "input.txt"), str(tmp_path / "vectors.hdf5"), "--model", str(checkpoint)])
    arrays, _ = read_output(tmp_path / "vectors.hdf5")
    model = ElmoModel.from_pretrained(checkpoint).eval()
    for index, words in enumerate(sentences):
        np.testing.assert_allclose(arrays[str(index)], direct_layers(model, words), atol=1e-6, rtol=0)


def test_perplexity_prints_what_the_python_api_computes(tmp_path, capsys):
    (tmp_path / "text.txt").write_text("the cat sat on the mat .\na dog ran home\n", encoding="utf-8")
    cli.main(["perplexity", "--text", str(tmp_path / "text.txt"), "--protocol", "stateless", "--json"])
    printed = json.loads(capsys.readouterr().out)
    model, tokenizer, vocabulary = perplexity.load_language_model(DEFAULT_MODEL)
    sentences = perplexity.read_sentences(tmp_path / "text.txt")
    assert printed == pytest.approx(
        perplexity.evaluate_perplexity(model, tokenizer, vocabulary, sentences, "stateless")
    )


def test_a_model_folder_whose_config_contradicts_its_weights_is_one_line(model_dir, tmp_path, capsys):
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(model_dir, checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps(config | {"lstm_dim": "16"}))
    write_lines(tmp_path / "input.txt", SENTENCES)
    for command in (
        ["embed", str(tmp_path / "input.txt"), str(tmp_path / "out.npz")],
        ["perplexity", "--text", str(tmp_path / "input.txt")],
    ):
        with pytest.raises(SystemExit) as exit_info:
            cli.main([*command, "--model", str(checkpoint)])
        assert exit_info.value.code == 2
        assert capsys.readouterr().err == f"error: {checkpoint}: lstm_dim must be a positive int, got '16'\n"
