"""recipes/english-bilm/train_gpu.sh, run as the device would run it (on this CPU, tiny): it trains with the decay timed
to the limit, packages the model, splits it into pieces, and --join reassembles a model that loads and scores as the
packaged one did.

It takes over a minute (one training process after another), so the suite runs it only with
`ELMO_RECIPE_TESTS=1`, as a maintainer does before a GPU lease (recipes/english-bilm/README.md)."""

import json
import lzma
import os
import subprocess
import tarfile

import pytest
import torch
from helpers import REPO_ROOT

from elmo_hf.inference.perplexity import evaluate_perplexity, load_language_model, read_sentences

SCRIPT = REPO_ROOT / "recipes" / "english-bilm" / "train_gpu.sh"
VARIANTS_SCRIPT = REPO_ROOT / "recipes" / "english-bilm" / "continue_gpu.sh"

pytestmark = pytest.mark.skipif(
    os.environ.get("ELMO_RECIPE_TESTS") != "1",
    reason="the GPU recipe's end-to-end runs take over a minute: ELMO_RECIPE_TESTS=1 runs them",
)


def test_the_device_script_trains_packages_and_the_pieces_join_into_the_model(tmp_path):
    data, out, run = tmp_path / "data", tmp_path / "out", tmp_path / "run"
    data.mkdir()
    sentences = [f"the {animal} sat on the {thing} ." for animal in ("cat", "dog", "cow") for thing in ("mat", "rug")]
    for split, lines in (("train", sentences * 20), ("valid", sentences)):
        with lzma.open(data / f"{split}.txt.xz", "wt", encoding="utf-8") as packed:
            packed.write("\n".join(lines) + "\n")
    settings = dict(MINUTES="0.08", LSTM_DIM="16", PROJECTION_DIM="8", FILTERS="tiny", BATCH="8", WARMUP="5")
    settings.update(WORKERS="0", NEGATIVES="4", DEVICE_ARGS="--use_cpu", OMP_NUM_THREADS="1")
    settings.update(GPU_TRAIN_DATA=str(data), GPU_TRAIN_RUN=str(run))  # the text and the work folder, as the device's
    subprocess.run(["bash", SCRIPT, out], env={**os.environ, **settings}, check=True, capture_output=True)
    log = (out / "train.log").read_text(encoding="utf-8")
    assert "decay sized to the time limit" in log and " done\n" in log
    assert sorted(path.name for path in out.iterdir() if not path.name.startswith("model.")) == [
        "config.json",
        "tokenizer_config.json",
        "train.log",
        "vocab.txt",
    ]
    pieces = sorted(out.glob("model.safetensors.part-*"))
    assert pieces and all(piece.stat().st_size <= 15_000_000 for piece in pieces)
    joined = tmp_path / "joined"
    subprocess.run(["bash", SCRIPT, "--join", out, joined], check=True, capture_output=True)
    packaged = json.loads((run / "packaged" / "eval_results.json").read_text(encoding="utf-8"))
    model, tokenizer, vocabulary = load_language_model(str(joined))
    result = evaluate_perplexity(model, tokenizer, vocabulary, read_sentences(run / "valid-2000.txt"), "stateless", 64)
    # (the script scored it on one thread; this process may use more, and sum in another order)
    assert result["perplexity"] == pytest.approx(packaged["packaged"]["valid-2000"]["perplexity"], rel=1e-6)
    # CONTINUE=1, the second call on the same machine: a new decay from the first run's model, packaged and joined
    out_continued, joined_continued = tmp_path / "out-continued", tmp_path / "joined-continued"
    settings.update(CONTINUE="1", MINUTES="0.05", LEARNING_RATE="1e-3", WARMUP="2", SEED="1")
    subprocess.run(["bash", SCRIPT, out_continued], env={**os.environ, **settings}, check=True, capture_output=True)
    assert "decay sized to the time limit" in (out_continued / "train.log").read_text(encoding="utf-8")
    subprocess.run(["bash", SCRIPT, "--join", out_continued, joined_continued], check=True, capture_output=True)
    continued, _, _ = load_language_model(str(joined_continued))
    assert continued.config.lstm_dim == model.config.lstm_dim == 16
    first_weights, continued_weights = model.state_dict(), continued.state_dict()
    assert first_weights.keys() == continued_weights.keys()
    assert all(not torch.equal(first_weights[name], continued_weights[name]) for name in first_weights)
    # recipes/english-bilm/continue_gpu.sh on a fresh machine: runs from a packaged model (START_MODEL) side by side,
    # one with the full softmax, each variant's output in one tar
    out_variants, work = tmp_path / "out-variants", tmp_path / "work"
    settings.pop("CONTINUE")
    settings.update(START_MODEL=str(joined), VARIANTS="sampled:8:4:1e-3 full:8:0:1e-3", TESTS="0", WORKERS="0")
    settings.update(GPU_CONTINUE_WORK=str(work))
    subprocess.run(["bash", VARIANTS_SCRIPT, out_variants], env={**os.environ, **settings}, check=True)
    assert sorted(path.name for path in out_variants.iterdir()) == [
        "full.log",
        "full.tar",
        "sampled.log",
        "sampled.tar",
        "session.log",
    ]
    for name in ("sampled", "full"):
        unpacked = tmp_path / name
        unpacked.mkdir()
        with tarfile.open(out_variants / f"{name}.tar") as packed:
            packed.extractall(unpacked, filter="data")
        subprocess.run(["bash", SCRIPT, "--join", unpacked, tmp_path / f"joined-{name}"], check=True)
        variant, _, _ = load_language_model(str(tmp_path / f"joined-{name}"))
        # the full-softmax run too is packaged with the start model's sampled softmax, for further CPU training
        assert variant.config.num_sampled_negatives == 4
        trained = json.loads((work / name / "continued" / "config.json").read_text(encoding="utf-8"))
        assert trained["num_sampled_negatives"] == (4 if name == "sampled" else 0)
        variant_weights = variant.state_dict()
        assert all(not torch.equal(first_weights[key], variant_weights[key]) for key in first_weights)
        evaluated = json.loads((work / name / "packaged" / "eval_results.json").read_text(encoding="utf-8"))
        assert evaluated["packaged"]["valid-2000"]["perplexity"] > 1


def test_continuing_without_an_earlier_model_says_so(tmp_path):
    settings = dict(CONTINUE="1", GPU_TRAIN_RUN=str(tmp_path / "run"), DEVICE_ARGS="--use_cpu")
    result = subprocess.run(
        ["bash", SCRIPT, tmp_path / "out"], env={**os.environ, **settings}, capture_output=True, text=True
    )
    assert result.returncode == 1
    assert f"CONTINUE=1: no earlier model at {tmp_path / 'run'}/model (a fresh machine?)" in result.stderr
