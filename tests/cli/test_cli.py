"""The `elmo-hf` command line: embed, convert and perplexity; help and argument errors before torch is imported."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ATOL, REPO_ROOT, SENTENCES, direct_layers, read_output, tiny_model, write_lines

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


CONSOLE_SCRIPT = Path(sys.executable).with_name("elmo-hf")  # the entry point this environment installed


def imported_modules(command, cwd):
    """(exit status, stderr, the top-level modules imported) of `python -X importtime COMMAND...` on this checkout."""
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *command], cwd=cwd, env=environment, capture_output=True, text=True
    )
    lines = done.stderr.splitlines()
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    return done.returncode, "\n".join(line for line in lines if not line.startswith("import time:")), imported


@pytest.mark.parametrize(
    "arguments, status, message",
    [
        (["--help"], 0, ""),
        (["embed", "--help"], 0, ""),
        (["embed"], 2, "the following arguments are required: INPUT, OUTPUT"),
        (["embed", "in.txt", "out.hdf5", "--batch-size", "x"], 2, "invalid int value: 'x'"),
        (["embed", "missing.txt", "out.hdf5"], 2, "error: missing.txt: no such file"),
        (["convert", "--published", "nope"], 2, "error: --published: unknown model 'nope'"),
        (["convert", "--weights", "w.hdf5"], 2, "error: --options: required with --weights"),
    ],
)
def test_help_and_argument_errors_import_neither_torch_nor_transformers(arguments, status, message, tmp_path):
    entries = [[str(CONSOLE_SCRIPT)]] if CONSOLE_SCRIPT.is_file() else []
    if arguments[-1] == "--help" or arguments == ["embed"]:
        entries.append(["-m", "elmo_hf.cli"])  # as torchrun starts it
    assert entries
    for entry in entries:
        returned, stderr, imported = imported_modules([*entry, *arguments], tmp_path)
        assert returned == status and message in stderr, stderr
        assert "Traceback" not in stderr
        assert not imported & {"torch", "transformers", "elmo_hf.model.modeling_elmo"}


def test_import_elmo_hf_registers_the_auto_classes_and_the_pipeline_task(tmp_path):
    code = (
        "import sys\n"
        "import elmo_hf\n"
        "PIPELINE_REGISTRY = sys.modules['transformers.pipelines'].PIPELINE_REGISTRY\n"
        "from transformers import AutoModel, AutoTokenizer\n"
        "assert type(AutoModel.from_pretrained(elmo_hf.DEFAULT_MODEL)) is elmo_hf.ElmoModel\n"
        "assert type(AutoTokenizer.from_pretrained(elmo_hf.DEFAULT_MODEL)) is elmo_hf.ElmoTokenizer\n"
        "task = PIPELINE_REGISTRY.supported_tasks['elmo-token-classification']\n"
        "assert task['impl'] is elmo_hf.ElmoTokenClassificationPipeline\n"
        "print('ok')\n"
    )
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert done.stdout == "ok\n", done.stderr


def test_the_parser_names_the_perplexity_protocols():
    assert cli.PROTOCOLS == perplexity.PROTOCOLS
