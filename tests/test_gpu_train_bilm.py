"""tools/gpu_train_bilm.sh, run as the device would run it (on this CPU, tiny): it trains with the decay timed to
the limit, packages the model, splits it into pieces, and --join reassembles a model that loads and scores as the
packaged one did."""

import json
import lzma
import os
import subprocess

import pytest
from helpers import REPO_ROOT

from elmo_hf.perplexity import evaluate_perplexity, load_language_model, read_sentences


def test_the_device_script_trains_packages_and_the_pieces_join_into_the_model(tmp_path):
    data, out, run = tmp_path / "data", tmp_path / "out", tmp_path / "run"
    data.mkdir()
    sentences = [f"the {animal} sat on the {thing} ." for animal in ("cat", "dog", "cow") for thing in ("mat", "rug")]
    for split, lines in (("train", sentences * 20), ("valid", sentences)):
        with lzma.open(data / f"{split}.txt.xz", "wt", encoding="utf-8") as packed:
            packed.write("\n".join(lines) + "\n")
    settings = dict(MINUTES="0.2", LSTM_DIM="16", PROJECTION_DIM="8", FILTERS="tiny", BATCH="8", WARMUP="5")
    settings.update(WORKERS="0", NEGATIVES="4", DEVICE_ARGS="--use_cpu", OMP_NUM_THREADS="1")
    settings.update(GPU_TRAIN_DATA=str(data), GPU_TRAIN_RUN=str(run))  # the text and the work folder, as the device's
    script = REPO_ROOT / "tools" / "gpu_train_bilm.sh"
    subprocess.run(["bash", script, out], env={**os.environ, **settings}, check=True, capture_output=True)
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
    subprocess.run(["bash", script, "--join", out, joined], check=True, capture_output=True)
    packaged = json.loads((run / "packaged" / "eval_results.json").read_text(encoding="utf-8"))
    model, tokenizer, vocabulary = load_language_model(str(joined))
    result = evaluate_perplexity(model, tokenizer, vocabulary, read_sentences(run / "valid-2000.txt"), "stateless", 64)
    # (the script scored it on one thread; this process may use more, and sum in another order)
    assert result["perplexity"] == pytest.approx(packaged["packaged"]["valid-2000"]["perplexity"], rel=1e-6)
