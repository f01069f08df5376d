"""What the freshness check of derived weight copies costs: its share of the model's time, per mode and batching.

    python benchmarks/weight_check_cost.py [--size medium] [--threads 1] [--reps 3] [--output benchmarks/results/NAME]

`weight_cache.derived_copy` fingerprints every weight that has a derived copy at the copy's first use in each forward
pass (`elmo_hf/weight_cache.py`). This script times that directly, in one process: it wraps
`weight_cache.fingerprint` with a timer and runs the shared harness's workload (`workload.make_workload` of the peer
folder) on random weights of the published layout at `--size`, in float32, bfloat16 (`model.to(torch.bfloat16)`) and
int8 (`model.quantize_weights("int8")`), as bare forwards: length-sorted and unsorted batches of 32, and single
sentences. A second timing of single sentences goes through `ElmoEmbedder.embed_sentences` of all 50 at once with
`batch_size=1`, where one check covers the whole call (`weights_held`). For each it prints the fingerprints per
forward, their milliseconds, and their share of the forward time. A share is a ratio inside one process, so other
jobs on the machine move it far less than they move words/s; `compare_revisions.py --interleaved --precision ...`
gives the words/s of the same workloads against an older revision.
"""

import argparse
import functools
import pathlib
import time

import torch
from benchmark_utils import PEER_DIR, in_precision, machine_line, peer_harness, prepare, write_report

from elmo_hf import ElmoEmbedder, ElmoModel, ElmoTokenizer, weight_cache

PRECISIONS = ("float32", "bfloat16", "int8")


class CheckTimer:
    """Wraps weight_cache.fingerprint: counts its calls and sums their seconds."""

    def __init__(self):
        self.calls, self.seconds = 0, 0.0
        self.original = weight_cache.fingerprint

    def __enter__(self):
        def timed(tensor):
            start = time.perf_counter()
            result = self.original(tensor)
            self.seconds += time.perf_counter() - start
            self.calls += 1
            return result

        weight_cache.fingerprint = timed
        return self

    def __exit__(self, *exception):
        weight_cache.fingerprint = self.original


def forwards(model, inputs):
    """Bare forwards of `model` on each encoded batch of `inputs`."""
    with torch.inference_mode():
        for batch in inputs:
            model(**batch, output_hidden_states=True)


def measure(run, units, reps):
    """{calls per unit, check ms per unit, total ms per unit, share} of `run()` (which does `units` units), best of
    `reps` by total time."""
    run()  # builds the copies
    best = None
    for _ in range(reps):
        with CheckTimer() as timer:
            start = time.perf_counter()
            run()
            total = time.perf_counter() - start
        if best is None or total < best[0]:
            best = (total, timer.seconds, timer.calls)
    total, check, calls = best
    return {
        "checks_per_forward": calls / units,
        "check_ms_per_forward": 1e3 * check / units,
        "forward_ms": 1e3 * total / units,
        "share": check / total,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=["small", "medium", "original"], default="medium")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--n-sent", type=int, default=256)
    parser.add_argument("--work-dir", type=pathlib.Path, default=pathlib.Path("/tmp/elmo-compare"))
    parser.add_argument("--peer-dir", type=pathlib.Path, default=PEER_DIR)
    parser.add_argument("--output", type=pathlib.Path, help="write OUTPUT.json and OUTPUT.log")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    benchlib, make_workload = peer_harness(args.peer_dir)
    _, checkpoint = prepare(args.work_dir, args.peer_dir, args.size)
    tokenizer = ElmoTokenizer()
    sentences = make_workload(args.n_sent, seed=0)
    batches = {
        "sorted": benchlib.make_batches(sentences, 32, sort=True),
        "unsorted": benchlib.make_batches(sentences, 32, sort=False),
        "batch1": [[sentence] for sentence in sentences[:50]],
    }
    encoded = {
        mode: [tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt") for batch in mode_batches]
        for mode, mode_batches in batches.items()
    }
    lines = [f"CPU: {machine_line()}", f"size {args.size}, {args.threads} threads, best of {args.reps}"]
    lines.append(f"{'precision':9s} {'batching':30s} {'checks':>6s} {'check ms':>9s} {'forward ms':>10s} {'share':>6s}")
    single_sentences = [batch[0] for batch in batches["batch1"]]
    results = {}
    for precision in PRECISIONS:
        model = in_precision(ElmoModel.from_pretrained(checkpoint).eval(), precision)
        runs = {mode: (functools.partial(forwards, model, encoded[mode]), len(encoded[mode])) for mode in encoded}
        runs["batch1, one embedder call"] = (
            functools.partial(ElmoEmbedder(model, tokenizer).embed_sentences, single_sentences, batch_size=1),
            len(single_sentences),
        )
        results[precision] = {}
        for label, (run, units) in runs.items():
            result = measure(run, units, args.reps)
            results[precision][label] = result
            lines.append(
                f"{precision:9s} {label:30s} {result['checks_per_forward']:6.2f} {result['check_ms_per_forward']:9.2f} "
                f"{result['forward_ms']:10.1f} {100 * result['share']:5.1f}%"
            )
            print(lines[-1], flush=True)
    print("\n".join(lines[:3]))
    if args.output is not None:
        write_report(args.output, {"report": lines, "results": results}, lines)


if __name__ == "__main__":
    main()
