"""Pilot trainings of the new default biLM at fixed compute: sizes and source mixes, scored per source.

Reads a `elmo-hf build-corpus` folder, writes each mix's training text (`corpus_builder.write_mix`), builds one
word vocabulary from the whole corpus's training text (so that every pilot's perplexities are comparable), trains
each pilot with `examples/run_bilm_pretraining.py` for the same arithmetic (steps scaled by the size's FLOPs per word
relative to the shipped size), then scores each on the first `--eval-sentences` sentences of every source's valid
split (stateless perplexity, `elmo_hf.perplexity`). One JSON line per pilot goes to `--results`.

    python tools/bilm_pilots.py outputs/corpus outputs/pilots --results benchmarks/results/pilots.jsonl \
        --base-steps 600 [--pilots small-all small-nonews ...]

Takes about an hour on two CPU cores at `--base-steps 600`. Not part of the test suite.
"""

import argparse
import json
import os
import platform
import runpy
import subprocess
import sys
import time

import torch

from elmo_hf.corpus_builder import MIXES, SOURCES, write_mix
from elmo_hf.perplexity import evaluate_perplexity, load_language_model
from elmo_hf.word_vocabulary import ElmoWordVocabulary

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Model shapes: run_bilm_pretraining.py flags. "shipped" is elmo-news-small's; "published-small" is bilm-tf's
# 2x1024_128_2048cnn_1xhighway.
SIZES = {
    "shipped": ["--filters", "small", "--num_highway_layers", "1", "--lstm_dim", "512", "--projection_dim", "192"],
    "wide": ["--filters", "small", "--num_highway_layers", "1", "--lstm_dim", "1024", "--projection_dim", "256"],
    "published-small": ["--filters", "original", "--num_highway_layers", "1", "--lstm_dim", "1024",
                        "--projection_dim", "128"],
}  # fmt: skip
PILOTS = {
    "shipped-all": ("shipped", "all"),
    "shipped-nonews": ("shipped", "nonews"),
    "shipped-lessreligious": ("shipped", "lessreligious"),
    "wide-all": ("wide", "all"),
    "published-small-all": ("published-small", "all"),
}


def flops_per_word(size_flags):
    """Forward matrix FLOPs per word of the character CNN, highway, projection and biLSTM (as shared/peer/flops.py)."""
    flags = dict(zip(size_flags[::2], size_flags[1::2]))
    filters = [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]]
    if flags["--filters"] == "small":
        filters = [[width, 25 * width] for width in range(1, 7)]
    num_filters = sum(count for _, count in filters)
    cnn = sum(2 * 16 * width * count * (50 - width + 1) for width, count in filters)
    highway = int(flags["--num_highway_layers"]) * 2 * num_filters * 2 * num_filters
    projection_dim, lstm_dim = int(flags["--projection_dim"]), int(flags["--lstm_dim"])
    cell = 2 * 2 * projection_dim * 4 * lstm_dim + 2 * lstm_dim * projection_dim
    return cnn + highway + 2 * num_filters * projection_dim + 2 * 2 * cell


def cpu_model():
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        names = [line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")]
    return names[0] if names else platform.machine()


def read_lines(path, limit):
    with open(path, encoding="utf-8") as file:
        return [line.split() for _, line in zip(range(limit), file)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus_dir")
    parser.add_argument("work_dir")
    parser.add_argument("--results", required=True, help="JSON lines, one per pilot (appended)")
    parser.add_argument("--pilots", nargs="+", choices=list(PILOTS), default=list(PILOTS))
    parser.add_argument("--base-steps", type=int, default=600, help="steps of the shipped size; others scaled")
    parser.add_argument("--eval-sentences", type=int, default=400)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    vocab_dir = os.path.join(args.work_dir, "mix-all")
    write_mix(args.corpus_dir, MIXES["all"], vocab_dir)
    vocab_file = os.path.join(vocab_dir, "vocab.txt")
    if not os.path.exists(vocab_file):
        build_vocab = runpy.run_path(os.path.join(REPOSITORY, "examples", "run_bilm_pretraining.py"))["build_vocab"]
        words = build_vocab(os.path.join(vocab_dir, "train.txt"), str.split, max_vocab_size=20000)
        ElmoWordVocabulary(words, source=vocab_file).save_pretrained(vocab_dir)
    for pilot in args.pilots:
        size, mix = PILOTS[pilot]
        mix_dir = os.path.join(args.work_dir, f"mix-{mix}")
        write_mix(args.corpus_dir, MIXES[mix], mix_dir)
        steps = round(args.base_steps * flops_per_word(SIZES["shipped"]) / flops_per_word(SIZES[size]))
        output_dir = os.path.join(args.work_dir, pilot)
        command = [
            sys.executable, os.path.join(REPOSITORY, "examples", "run_bilm_pretraining.py"),
            "--train_file", os.path.join(mix_dir, "train.txt"), "--output_dir", output_dir, "--do_train",
            *SIZES[size], "--max_characters_per_token", "50", "--num_lstm_layers", "2",
            "--num_sampled_negatives", "1024", "--pretraining_dropout", "0.15", "--max_vocab_size", "20000",
            "--max_words_per_sentence", "80", "--train_sampling_strategy", "group_by_length",
            "--optim", "adamw_torch", "--learning_rate", "3e-3", "--weight_decay", "0", "--warmup_steps", "100",
            "--lr_scheduler_type", "linear", "--max_steps", str(steps), "--per_device_train_batch_size", "64",
            "--max_grad_norm", "1.0", "--save_strategy", "no", "--logging_steps", "100", "--report_to", "none",
            "--use_cpu", "--seed", "0",
        ]  # fmt: skip
        command += ["--vocab_file", vocab_file]
        started = time.time()
        environment = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        subprocess.run(command, check=True, env=environment)
        train_seconds = time.time() - started
        model, tokenizer, vocabulary = load_language_model(output_dir)
        torch.manual_seed(0)
        per_source = {}
        for name in SOURCES:
            sentences = read_lines(os.path.join(args.corpus_dir, name, "valid.txt"), args.eval_sentences)
            result = evaluate_perplexity(model, tokenizer, vocabulary, sentences, "stateless", batch_size=32)
            per_source[name] = round(result["perplexity"], 2)
        record = {
            "pilot": pilot,
            "size": size,
            "mix": mix,
            "steps": steps,
            "batch": 64,
            "mflops_per_word_forward": round(flops_per_word(SIZES[size]) / 1e6, 2),
            "train_seconds": round(train_seconds),
            "valid_perplexity_first_sentences": args.eval_sentences,
            "valid_perplexity": per_source,
            "cpu": cpu_model(),
            "date": time.strftime("%Y-%m-%d"),
        }
        print(json.dumps(record), flush=True)
        with open(args.results, "a", encoding="utf-8") as results:
            results.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
