"""The same training command, run twice in fresh processes with the same `--seed`, on the same machine and thread
count, saves bit-identical weights and scores: the two task head scripts and biLM pretraining. The two processes get
different `PYTHONHASHSEED`s, so nothing may depend on the order Python's per-process string hashing gives a set.
"""

import json
import os
import random
import shutil
import subprocess
import sys

import pytest
import torch
from helpers import REPO_ROOT, WORDS, tiny_lm
from safetensors.torch import load_file

from elmo_hf import ElmoTokenizer, ElmoWordVocabulary

# Words the biLM's softmax knows and words it does not, so that the task vocabulary joins both.
TASK_WORDS = [*WORDS[3:], "film", "plot", "dull", "great", "Cat", "Dog"]
# The examples/README.md recipes' task input options, on a tiny biLM and a few steps.
HEAD_OPTIONS = (
    "--task_word_min_count 2 --task_words_from_bilm --task_word_pretrained_vocab --use_bilm_token_layer false "
    "--task_encoder_hidden_size 8 --classifier_dropout 0.3 --task_word_dropout 0.1 --learning_rate 5e-3 "
    "--per_device_train_batch_size 4 --max_steps 6 --do_train --do_eval --do_predict --eval_strategy steps "
    "--eval_steps 3 --save_strategy steps --save_steps 3 --load_best_model_at_end --metric_for_best_model accuracy "
    "--save_total_limit 1 --report_to none --use_cpu --disable_tqdm true --seed 3"
).split()
PRETRAINING_OPTIONS = (
    "--filters tiny --char_embedding_dim 4 --num_highway_layers 1 --lstm_dim 16 --projection_dim 8 "
    "--max_characters_per_token 20 --num_sampled_negatives 6 --pretraining_dropout 0.1 --optim adamw_torch "
    "--per_device_train_batch_size 4 --max_steps 4 --do_train --do_eval --save_strategy no --report_to none "
    "--use_cpu --disable_tqdm true --seed 3"
).split()


def sentences(count, seed):
    rng = random.Random(seed)
    return [[rng.choice(TASK_WORDS) for _ in range(rng.randint(2, 7))] for _ in range(count)]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A tiny biLM with a softmax and its vocabulary, tagging and sentence classification files, and a text."""
    folder = tmp_path_factory.mktemp("data")
    bilm = folder / "bilm"
    tiny_lm(seed=1).save_pretrained(bilm)
    ElmoTokenizer(max_characters_per_token=20).save_pretrained(bilm)
    ElmoWordVocabulary(WORDS).save_pretrained(bilm)
    files = {}
    for split, count in (("train", 16), ("validation", 6), ("test", 6)):
        rows = sentences(count, seed=len(split))
        files[f"tagging_{split}"] = folder / f"{split}.conll"
        files[f"tagging_{split}"].write_text(
            "\n\n".join("\n".join(f"{w}\t{'N' if w.lower() in ('cat', 'dog') else 'X'}" for w in s) for s in rows)
            + "\n"
        )
        files[f"classification_{split}"] = folder / f"{split}.csv"
        files[f"classification_{split}"].write_text(
            "text,label\n" + "".join(f"{' '.join(s)},{'pos' if 'great' in s else 'neg'}\n" for s in rows)
        )
    files["text"] = folder / "text.txt"
    files["text"].write_text("".join(" ".join(s) + "\n" for s in sentences(24, seed=9)))
    return bilm, files


def train_twice(script, arguments, output_dir):
    """Runs `examples/{script}.py` in two fresh processes at once, each with one thread, one with `PYTHONHASHSEED=1`
    and one with 2, writing to `output_dir`/run1 and run2; returns each run's saved weights and the metrics it wrote
    (timings left out)."""
    processes = []
    for hash_seed in (1, 2):
        environment = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "OMP_NUM_THREADS": "1"}
        environment["PYTHONPATH"] = str(REPO_ROOT)
        command = [sys.executable, str(REPO_ROOT / "examples" / f"{script}.py"), *map(str, arguments)]
        command += ["--output_dir", str(output_dir / f"run{hash_seed}")]
        processes.append(subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    runs = []
    for hash_seed, process in zip((1, 2), processes):
        stdout, stderr = process.communicate()
        assert process.returncode == 0, stderr.decode()[-3000:]
        folder = output_dir / f"run{hash_seed}"
        metrics = {}
        for name in ("eval_results.json", "test_results.json"):
            if (folder / name).is_file():
                metrics |= json.loads((folder / name).read_text())
        if script == "run_bilm_pretraining":
            metrics |= json.loads(stdout.decode().strip().splitlines()[-1])
        timings = ("runtime", "per_second", "total_flos")
        metrics = {key: value for key, value in metrics.items() if not any(part in key for part in timings)}
        runs.append((load_file(folder / "model.safetensors"), metrics))
    return runs


def assert_identical(first, second):
    (weights, metrics), (other_weights, other_metrics) = first, second
    assert weights.keys() == other_weights.keys()
    different = [name for name in weights if not torch.equal(weights[name], other_weights[name])]
    assert not different, f"weights differ between the two runs: {different}"
    assert metrics and metrics == other_metrics


@pytest.mark.parametrize("task", ["tagging", "classification"])
def test_a_head_trains_to_the_same_weights_in_two_processes(tmp_path, data, task):
    bilm, files = data
    script = "run_token_classification" if task == "tagging" else "run_text_classification"
    arguments = ["--model_name_or_path", bilm, *HEAD_OPTIONS]
    for split in ("train", "validation", "test"):
        arguments += [f"--{split}_file", files[f"{task}_{split}"]]
    runs = train_twice(script, arguments, tmp_path)
    assert_identical(*runs)
    # The head's task words are the training words seen twice joined by the biLM's softmax words.
    config = json.loads((tmp_path / "run1" / "config.json").read_text())
    assert {"cat", "film", "mat"} <= set(config["task_word_vocab"])


def test_bilm_pretraining_trains_to_the_same_weights_in_two_processes(tmp_path, data):
    _, files = data
    arguments = [*PRETRAINING_OPTIONS, "--train_file", files["text"], "--validation_file", files["text"]]
    runs = train_twice("run_bilm_pretraining", arguments, tmp_path)
    assert_identical(*runs)
    assert runs[0][1]["eval_perplexity"] > 1


@pytest.mark.parametrize("run", ["", "run/"])
def test_git_keeps_nothing_a_training_run_writes(tmp_path, run):
    """A run under training/NAME/ or outputs/NAME/ leaves git untouched: no checkpoint, optimizer or scheduler state,
    no start model, no final weights (what lands is a packaged model, elsewhere)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text((REPO_ROOT / ".gitignore").read_text(encoding="utf-8"), encoding="utf-8")
    state = ["config.json", "model.safetensors", "optimizer.pt", "rng_state.pth", "scheduler.pt", "trainer_state.json"]
    for top in ("training", "outputs"):
        folder = tmp_path / top / "english-run" / run
        (folder / "checkpoint-500").mkdir(parents=True)
        for name in [*state, "modeling_elmo.py", "training_args.bin"]:
            (folder / "checkpoint-500" / name).write_text("x")
        for name in ["start/model.safetensors", "model.safetensors", "config.json"]:  # the start model, the weights
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text("x")
    listed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=tmp_path, capture_output=True, text=True
    ).stdout.split()
    assert set(listed) - {"??"} == {".gitignore"}
