"""allennlp's `Elmo` against its drop-in `elmo_hf.compat.allennlp.Elmo`, in one process, on the same weights.

    PEERVENV/bin/python benchmarks/benchmark_compat_allennlp.py --size medium [--reps 2] [--json OUT]

Runs in allennlp's peer venv (../shared/peer/setup_peervenv.sh), which also imports elmo_hf from this checkout. Both
sides are built the same way, `Elmo(options.json, weights.hdf5, num_output_representations=1, dropout=0.0)` in eval
mode, on random weights in the published layout (the peer folder's make_random_elmo.py), and fed
`batch_to_ids` of the shared workload (512 sentences, 13,267 words; `--n-sent` takes its first ones) by the shared
harness (`benchlib.time_pass`):
length-sorted batches of 32, then the first `--n-single` sentences one at a time. The repetitions alternate between
the two sides, so that the machine's load falls on both; figures are the median repetition. allennlp's biLM is
stateful and ours is not by default: allennlp's state is reset before each pass, as the harness does.
The first construction of the drop-in converts and caches the pair (its load time is printed apart).
"""

import argparse
import json
import os
import subprocess
import sys
import time

import benchmark_utils

sys.path.insert(0, str(benchmark_utils.REPO_ROOT))  # elmo_hf from this checkout, in the peer venv


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=benchmark_utils.SIZES, default="medium")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-sent", type=int, default=512, help="sentences of the workload to time in batches")
    parser.add_argument("--n-single", type=int, default=50)
    parser.add_argument("--work-dir", default="/tmp/elmo-bench", help="random weights and the conversion cache")
    parser.add_argument("--peer-dir", default=str(benchmark_utils.PEER_DIR))
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    benchlib, make_workload = benchmark_utils.peer_harness(args.peer_dir)
    import allennlp_elmo_shim  # noqa: F401  (before allennlp)
    import numpy as np
    import torch
    from allennlp.modules.elmo import Elmo as AllennlpElmo
    from allennlp.modules.elmo import batch_to_ids as allennlp_batch_to_ids

    source = os.path.join(args.work_dir, args.size)
    if not os.path.isfile(os.path.join(source, "weights.hdf5")):
        script = os.path.join(args.peer_dir, "make_random_elmo.py")
        subprocess.run([sys.executable, script, source, *benchmark_utils.SIZES[args.size]], check=True)
    os.environ["ELMO_HF_CACHE"] = os.path.join(args.work_dir, "elmo_hf_cache")
    from elmo_hf.compat.allennlp import Elmo, batch_to_ids, cache_dir

    cached_before = os.path.isdir(cache_dir()) and bool(os.listdir(cache_dir()))

    torch.set_num_threads(args.threads)
    pair = (os.path.join(source, "options.json"), os.path.join(source, "weights.hdf5"))
    start = time.perf_counter()
    theirs = AllennlpElmo(*pair, num_output_representations=1, dropout=0.0).eval()
    their_load = time.perf_counter() - start
    start = time.perf_counter()
    ours = Elmo(*pair, num_output_representations=1, dropout=0.0).eval()
    our_load = time.perf_counter() - start
    start = time.perf_counter()
    Elmo(*pair, num_output_representations=1, dropout=0.0)
    our_cached_load = time.perf_counter() - start

    def reset_theirs():
        theirs._elmo_lstm._elmo_lstm.reset_states()

    sides = {
        "allennlp": (allennlp_batch_to_ids, lambda ids: theirs(ids)["elmo_representations"][0], reset_theirs),
        "elmo_hf.compat": (batch_to_ids, lambda ids: ours(ids)["elmo_representations"][0], ours.reset_states),
    }
    sentences = make_workload(512, seed=0)[: args.n_sent]
    with torch.inference_mode():
        reset_theirs()
        check = [side[1](side[0](sentences[:8])).numpy() for side in sides.values()]
    difference = float(np.abs(check[0] - check[1]).max())
    modes = {
        "sorted": benchlib.make_batches(sentences, 32, sort=True),
        "batch1": [[sentence] for sentence in sentences[: args.n_single]],
    }
    timings = {(name, mode): [] for name in sides for mode in modes}
    for rep in range(args.reps):
        for mode, batches in modes.items():
            for name, (prep, embed, reset) in sides.items():
                timings[name, mode].append(benchlib.time_pass(prep, embed, reset, batches))
                result = timings[name, mode][-1]
                print(f"rep {rep} {mode:6s} {name:15s} {result['n_tok'] / result['total_s']:8.1f} words/s", flush=True)

    figures = {name: {mode: benchlib.summarize(timings[name, mode])["tok_per_s"] for mode in modes} for name in sides}
    words = sum(len(sentence) for sentence in sentences)
    print(f"\n{benchmark_utils.machine_line()}; torch {torch.__version__}, {args.threads} threads; size {args.size}")
    print(f"{len(sentences)} sentences ({words} words) in batches of 32, {args.n_single} alone; {args.reps} reps")
    first = "from the cache" if cached_before else "converted"
    print(f"load: allennlp {their_load:.1f} s, drop-in {our_load:.1f} s ({first}), again {our_cached_load:.1f} s")
    print(f"vectors of the first 8 sentences: max difference {difference:.2e}")
    print(f"{'mode':8s} {'allennlp words/s':>17s} {'drop-in words/s':>16s} {'ratio':>6s}")
    for mode in modes:
        theirs_rate, ours_rate = figures["allennlp"][mode], figures["elmo_hf.compat"][mode]
        ratios = [
            (ours_pass["n_tok"] / ours_pass["total_s"]) / (theirs_pass["n_tok"] / theirs_pass["total_s"])
            for theirs_pass, ours_pass in zip(timings["allennlp", mode], timings["elmo_hf.compat", mode])
        ]
        spread = f"per repetition {min(ratios):.2f}x-{max(ratios):.2f}x"
        print(f"{mode:8s} {theirs_rate:17.1f} {ours_rate:16.1f} {ours_rate / theirs_rate:5.2f}x  ({spread})")
    if args.json:
        record = {
            "machine": benchmark_utils.machine_line(),
            "size": args.size,
            "threads": args.threads,
            "reps": args.reps,
            "sentences": len(sentences),
            "words": words,
            "n_single": args.n_single,
            "words_per_second": figures,
            "max_difference_first_8": difference,
            "load_seconds": {"allennlp": their_load, "drop_in_first": our_load, "drop_in_again": our_cached_load},
            "drop_in_first_load": first,
        }
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump(record, file, indent=1)


if __name__ == "__main__":
    main()
