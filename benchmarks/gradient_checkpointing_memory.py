"""Peak memory of one training step of the biLM with and without gradient checkpointing.

    python benchmarks/gradient_checkpointing_memory.py [--sentences 8] [--words 100] [--paths packed reference]
        [--threads 2] [--output FILE.json]

At the original size (ElmoConfig's defaults: char CNN 2048 filters, LSTM 4096, projection 512, 93.6M parameters),
with random weights, on a batch of --sentences sentences of --words words each (random lowercase words of 3-10
letters, nearly all distinct): each (path, checkpointing) pair runs in a fresh process, which builds the model,
tokenizes the batch, runs one forward (every layer and the final state into the loss) and backward, and reports its
peak resident set size (`resource.getrusage(RUSAGE_SELF).ru_maxrss`, which counts what torch's CPU allocator takes,
unlike tracemalloc) after the step, its resident set size before it (/proc/self/statm) and the step's wall time. The
step's own peak is the difference; the gradients (375 MB) are part of it in both modes. (A step whose peak stays
below the process's earlier high-water mark would make the difference meaningless: the script stops then.) The same
seed gives both modes the same weights and batch: their losses and gradient norms agree.
"""

import argparse
import json
import pathlib
import random
import resource
import subprocess
import sys
import time

from benchmark_utils import REPO_ROOT, machine_line


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def rss_mb():
    return int(pathlib.Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**20


def worker(args):
    """One step in this process: print JSON with the peak RSS before and after it and its time."""
    import torch

    from elmo_hf import ElmoConfig, ElmoModel, ElmoTokenizer

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(lstm_implementation=args.path)).train()
    if args.checkpointing:
        model.gradient_checkpointing_enable()
    letters = random.Random(0)
    sentences = [
        ["".join(letters.choices("abcdefghijklmnopqrstuvwxyz", k=letters.randint(3, 10))) for _ in range(args.words)]
        for _ in range(args.sentences)
    ]
    batch = ElmoTokenizer()(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    before, peak_before = rss_mb(), peak_rss_mb()
    start = time.perf_counter()
    output = model(**batch, output_hidden_states=True)
    loss = sum(value.square().mean() for value in (*output.hidden_states, *output.lstm_states))
    loss.backward()
    seconds = time.perf_counter() - start
    gradient_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])).item()
    print(
        json.dumps(
            dict(
                path=args.path,
                checkpointing=args.checkpointing,
                words=int(batch["attention_mask"].sum()),
                rss_before_mb=round(before, 1),
                peak_before_mb=round(peak_before, 1),
                peak_mb=round(peak_rss_mb(), 1),
                step_seconds=round(seconds, 2),
                loss=loss.item(),
                gradient_norm=gradient_norm,
            )
        )
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--paths", nargs="+", default=["packed", "reference"], choices=["packed", "reference"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=pathlib.Path, help="also write the results here as JSON")
    parser.add_argument("--worker-path", dest="path", help=argparse.SUPPRESS)
    parser.add_argument("--worker-checkpointing", dest="checkpointing", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.path:
        return worker(args)

    print(f"machine: {machine_line()}")
    print(f"original size, {args.sentences} sentences x {args.words} words, {args.threads} threads")
    command = [sys.executable, __file__, "--sentences", str(args.sentences), "--words", str(args.words)]
    command += ["--threads", str(args.threads)]
    results = []
    for path in args.paths:
        for checkpointing in (False, True):
            flags = ["--worker-path", path] + (["--worker-checkpointing"] if checkpointing else [])
            finished = subprocess.run(command + flags, capture_output=True, text=True, cwd=REPO_ROOT)
            if finished.returncode:
                sys.exit(f"error: the {path} worker failed:\n{finished.stderr[-3000:]}")
            result = json.loads(finished.stdout.strip().splitlines()[-1])
            if result["peak_mb"] <= result["peak_before_mb"]:
                sys.exit(f"error: {path}: the step's peak did not pass the earlier high-water mark: {result}")
            results.append(result)
    print("| path | checkpointing | peak RSS (MB) | of it, the step (MB) | step (s) | loss | gradient norm |")
    print("|---|---|---|---|---|---|---|")
    for result in results:
        step = result["peak_mb"] - result["rss_before_mb"]
        print(
            f"| {result['path']} | {'on' if result['checkpointing'] else 'off'} | {result['peak_mb']:,.0f} | "
            f"{step:,.0f} | {result['step_seconds']:.1f} | {result['loss']:.6f} | {result['gradient_norm']:.6f} |"
        )
    for path in args.paths:
        off, on = (r for r in results if r["path"] == path)
        saved = (off["peak_mb"] - off["rss_before_mb"]) / (on["peak_mb"] - on["rss_before_mb"])
        print(
            f"{path}: the step's peak {saved:.2f}x lower with checkpointing, "
            f"{on['step_seconds'] / off['step_seconds']:.2f}x the time"
        )
    if args.output:
        settings = dict(sentences=args.sentences, words=args.words, threads=args.threads)
        report = dict(machine=machine_line(), settings=settings, results=results)
        args.output.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
