"""Time two revisions of elmo_hf against each other: the same random weights, the same workload, in one run.

    python benchmarks/compare_revisions.py --old-root /tmp/elmo-old [--new-root .] [--size medium] [--rounds 2]
        [--reps 3] [--n-sent 256] [--threads 2] [--work-dir /tmp/elmo-compare] [--output benchmarks/results/NAME]

`--old-root` is a checkout of the older revision (e.g. `git worktree add /tmp/elmo-old 1551014`). The weights
are `make_random_elmo.py` of the shared peer folder at `--size` (medium: `--dim 2048 --proj 256 --n-highway 1`),
converted once with the NEW revision's converter, as `benchmark_elmo.py` does; both revisions load that checkpoint
(the parameter names are the same). Each round runs the old revision's process, then the new one's (each imports
elmo_hf from its own root, checked), with the shared harness `benchlib.run_suite` on `workload.make_workload`:
sorted and unsorted batches of 32 and single sentences. Each mode keeps its best round. The script prints words/s
per mode, the ratio new/old, the largest difference between the two revisions' vectors (every layer of the first
8 sentences) and the CPU model; with `--output`, it writes NAME.json and NAME.log.

`--interleaved` adds a check that other jobs on a shared machine cannot skew: ONE process loads both revisions'
model code (`modeling_elmo.py` and its siblings, imported as two packages of their own, without the Auto
registrations) and times every batch of every mode on both, old and new alternately (the order swapped from batch
to batch), `--reps` times; it prints the summed model time per mode and revision, and the largest difference
between the two revisions' vectors for the first 8 sentences embedded one at a time (a single sentence may take
other kernels than a batch). `--precision bfloat16|int8` runs it on `model.to(torch.bfloat16)` or
`model.quantize_weights("int8")`, and `--token-cache` passes each revision's `ElmoTokenCache` of the workload's words
as `token_cache` (the modes whose derived weight copies have their own checks); `--rounds 0 --interleaved` runs only
this check.
"""

import argparse
import importlib.util
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time

from benchmark_utils import (
    CHECK_SENTENCES,
    MODES,
    PEER_DIR,
    REPO_ROOT,
    SIZES,
    cpu_model,
    in_precision,
    machine_line,
    peer_harness,
    prepare,
    write_report,
)


def worker(args):
    """Runs in a fresh process: elmo_hf from `--code-root`, the check vectors to `--dump`, the timing suite."""
    import numpy as np
    import torch

    import elmo_hf
    from elmo_hf import ElmoModel, ElmoTokenizer

    imported_from = pathlib.Path(elmo_hf.__file__).resolve().parent
    if imported_from != args.code_root.resolve() / "elmo_hf":
        raise RuntimeError(f"elmo_hf came from {imported_from}, expected {args.code_root}/elmo_hf")
    benchlib, make_workload = peer_harness(args.peer_dir)
    torch.set_num_threads(args.threads)
    model = ElmoModel.from_pretrained(args.worker).eval()
    tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)

    def prep(sentences):
        return tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")

    def embed(batch):
        # As benchmark_elmo.py: an average of all layers, on the host.
        return torch.stack(model(**batch, output_hidden_states=True).hidden_states).mean(0)

    sentences = make_workload(args.n_sent, seed=0)
    with torch.inference_mode():
        layers = model(**prep(sentences[:CHECK_SENTENCES]), output_hidden_states=True).hidden_states
    np.save(args.dump, torch.stack(layers).numpy())  # (layers, batch, words, dim)
    results = benchlib.run_suite(
        prep, embed, lambda: None, sentences, reps=args.reps, log=lambda message: print(message, flush=True)
    )
    results["env"] = benchlib.env_info()
    results["elmo_hf_file"] = elmo_hf.__file__
    args.json.write_text(json.dumps(results, indent=1))


# Where a module lives in a revision: in elmo_hf/ itself (the flat layout) or in a subpackage (the layered one).
LAYERED = {"modeling_elmo": "model", "embedder": "inference"}


def is_checkout(root):
    """Whether `root` is a checkout of elmo-hf, in either layout."""
    package = pathlib.Path(root) / "elmo_hf"
    return (package / "modeling_elmo.py").is_file() or (package / "model" / "modeling_elmo.py").is_file()


def revision_module(package, name):
    """The module `name` of the revision imported as `package`, in whichever layout it has."""
    layered = importlib.util.find_spec(f"{package}.model") is not None
    return importlib.import_module(f"{package}.{LAYERED[name]}.{name}" if layered else f"{package}.{name}")


def load_model_code(code_root, package, directory):
    """Import `code_root`'s elmo_hf modules as the package `package` (in `directory`): its ElmoModel class. Every
    module and subpackage is linked in but elmo_hf/__init__.py, the one that registers the Auto classes."""
    folder = pathlib.Path(directory) / package
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for source in (pathlib.Path(code_root) / "elmo_hf").iterdir():
        if source.name != "__init__.py" and (source.suffix == ".py" or (source / "__init__.py").is_file()):
            (folder / source.name).symlink_to(source.resolve())
    return revision_module(package, "modeling_elmo").ElmoModel


def revision_token_cache(package, model, words, tokenizer):
    """The revision `package`'s ElmoTokenCache of `words` for `model`."""
    ElmoTokenCache = revision_module(package, "embedder").ElmoTokenCache
    char_ids = tokenizer([words], is_split_into_words=True, return_tensors="pt")["input_ids"][0]
    return ElmoTokenCache(model.character_encoder, char_ids)


def interleaved(args, checkpoint):
    """Both revisions in this process, batch by batch: ({mode: {"old": words/s, "new": words/s}}, the largest
    difference between their vectors over every layer of the first CHECK_SENTENCES sentences, each alone)."""
    import torch

    from elmo_hf import ElmoTokenizer

    benchlib, make_workload = peer_harness(args.peer_dir)
    torch.set_num_threads(args.threads)
    directory = tempfile.mkdtemp()
    sys.path.insert(0, directory)  # the two revisions' model code, as packages elmo_old and elmo_new
    models = {
        name: in_precision(
            load_model_code(root, f"elmo_{name}", directory).from_pretrained(checkpoint).eval(), args.precision
        )
        for name, root in (("old", args.old_root), ("new", args.new_root))
    }
    tokenizer = ElmoTokenizer(max_characters_per_token=models["new"].config.max_characters_per_token)
    sentences = make_workload(args.n_sent, seed=0)
    words = sorted({word for sentence in sentences for word in sentence})
    caches = {
        name: revision_token_cache(f"elmo_{name}", model, words, tokenizer) if args.token_cache else None
        for name, model in models.items()
    }
    modes = {
        "sorted": benchlib.make_batches(sentences, 32, sort=True),
        "unsorted": benchlib.make_batches(sentences, 32, sort=False),
        "batch1": [[sentence] for sentence in sentences[:50]],
    }
    seconds = {mode: {"old": 0.0, "new": 0.0} for mode in MODES}
    with torch.inference_mode():
        for batch in modes["unsorted"][:2] + modes["batch1"][:3]:  # warm-up, as benchlib.run_suite
            for name, model in models.items():
                model(
                    **tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt"),
                    token_cache=caches[name],
                )
        for _ in range(args.reps):
            for mode in MODES:
                for index, batch in enumerate(modes[mode]):
                    inputs = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
                    for name in ("old", "new") if index % 2 == 0 else ("new", "old"):
                        start = time.perf_counter()
                        outputs = models[name](**inputs, output_hidden_states=True, token_cache=caches[name])
                        torch.stack(outputs.hidden_states).float().mean(0)
                        seconds[mode][name] += time.perf_counter() - start
        # The check of the worker processes covers one batch; single sentences may take other kernels (one row).
        single_difference = 0.0
        for sentence in sentences[:CHECK_SENTENCES]:
            inputs = tokenizer([sentence], is_split_into_words=True, return_tensors="pt")
            old, new = (
                torch.stack(models[name](**inputs, output_hidden_states=True, token_cache=caches[name]).hidden_states)
                for name in ("old", "new")
            )  # (layers, 1, words, dim)
            single_difference = max(single_difference, float((new.float() - old.float()).abs().max()))
    words = {mode: args.reps * sum(len(sentence) for batch in modes[mode] for sentence in batch) for mode in MODES}
    rates = {mode: {name: words[mode] / seconds[mode][name] for name in ("old", "new")} for mode in MODES}
    return rates, single_difference


def run_revision(args, name, code_root, checkpoint):
    json_path, dump_path = args.work_dir / f"{name}.json", args.work_dir / f"{name}.npy"
    command = [
        sys.executable,
        __file__,
        "--worker",
        str(checkpoint),
        "--code-root",
        str(code_root),
        "--json",
        str(json_path),
        "--dump",
        str(dump_path),
        "--reps",
        str(args.reps),
        "--threads",
        str(args.threads),
        "--n-sent",
        str(args.n_sent),
        "--peer-dir",
        str(args.peer_dir),
    ]
    # PYTHONPATH comes before the installed elmo_hf: the worker imports the revision's own (and checks that it did).
    subprocess.run(command, check=True, env={**os.environ, "PYTHONPATH": str(code_root)})
    return json.loads(json_path.read_text())


def prepare_checkpoint(args):
    """Random weights in the published layout, converted with the new revision's converter; the checkpoint dir."""
    sys.path.insert(0, str(args.new_root))  # the new revision's converter
    return prepare(args.work_dir, args.peer_dir, args.size)[1]


def process_rounds(args, rounds, lines):
    """The alternating processes' summary (words/s per mode and round, ratios of the best rounds, the vectors'
    largest difference); adds its lines to `lines`."""
    import numpy as np

    difference = float(np.abs(np.load(args.work_dir / "old.npy") - np.load(args.work_dir / "new.npy")).max())
    summary = {"modes": {}, "max_abs_difference_old_new": difference, "env": rounds["new"][0]["env"]}
    lines.append(f"{'mode':9s} {'old words/s (rounds)':>26s} {'new words/s (rounds)':>26s} {'new/old':>8s}")
    for mode in MODES:
        old = [result[mode]["tok_per_s"] for result in rounds["old"]]
        new = [result[mode]["tok_per_s"] for result in rounds["new"]]
        ratio = max(new) / max(old)
        summary["modes"][mode] = {"old_rounds": old, "new_rounds": new, "ratio_best": ratio}
        lines.append(
            f"{mode:9s} {max(old):8.1f} ({'/'.join(f'{v:.0f}' for v in old):>15s}) "
            f"{max(new):8.1f} ({'/'.join(f'{v:.0f}' for v in new):>15s}) {ratio:7.2f}x"
        )
    lines.append(f"max |new - old| over every layer of {CHECK_SENTENCES} sentences: {difference:.2e}")
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-root", type=pathlib.Path, help="checkout of the older revision")
    parser.add_argument("--new-root", type=pathlib.Path, default=REPO_ROOT)
    parser.add_argument("--size", choices=list(SIZES), default="medium")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (old, new); best kept per mode")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per mode inside one process (median kept)")
    parser.add_argument("--n-sent", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work-dir", type=pathlib.Path, default=pathlib.Path("/tmp/elmo-compare"))
    parser.add_argument("--peer-dir", type=pathlib.Path, default=PEER_DIR)
    parser.add_argument("--output", type=pathlib.Path, help="write OUTPUT.json and OUTPUT.log")
    parser.add_argument("--interleaved", action="store_true", help="also time both in one process (see above)")
    parser.add_argument("--precision", choices=["float32", "bfloat16", "int8"], default="float32", help="interleaved")
    parser.add_argument("--token-cache", action="store_true", help="interleaved: with each revision's token cache")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--code-root", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.old_root is None or not is_checkout(args.old_root):
        raise SystemExit(
            f"error: --old-root {args.old_root}: expected a checkout of elmo-hf (elmo_hf/model/modeling_elmo.py)"
        )
    args.work_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = prepare_checkpoint(args)

    lines = [
        f"CPU: {machine_line()} at start",
        f"old: {args.old_root.resolve()}, new: {args.new_root.resolve()}, size {args.size}, "
        f"{args.n_sent} sentences, {args.rounds} rounds x {args.reps} reps, {args.threads} threads, "
        f"interleaved: {args.precision}{', token cache' if args.token_cache else ''}",
    ]
    print("\n".join(lines), flush=True)
    rounds = {"old": [], "new": []}
    for index in range(args.rounds):
        for name, root in (("old", args.old_root), ("new", args.new_root)):
            print(f"round {index}: {name}", flush=True)
            rounds[name].append(run_revision(args, name, root, checkpoint))

    summary = {"cpu": cpu_model(), "python": platform.python_version(), "size": args.size}
    if args.rounds:
        summary.update(process_rounds(args, rounds, lines))
    if args.interleaved:
        print("interleaved, one process", flush=True)
        rates, single_difference = interleaved(args, checkpoint)
        summary["interleaved_words_per_s"] = rates
        summary["single_sentence_max_abs_difference"] = single_difference
        lines.append(f"interleaved in one process, model time only, {args.reps} reps, batch by batch:")
        for mode, mode_rates in rates.items():
            lines.append(
                f"{mode:9s} old {mode_rates['old']:8.1f} words/s  new {mode_rates['new']:8.1f} words/s  "
                f"new/old {mode_rates['new'] / mode_rates['old']:5.2f}x"
            )
        lines.append(
            f"max |new - old| over every layer of {CHECK_SENTENCES} sentences, each alone: {single_difference:.2e}"
        )
    lines.append("load average at end " + " ".join(f"{value:.1f}" for value in os.getloadavg()))
    print("\n".join(lines[2:]), flush=True)
    summary["report"] = lines
    if args.output is not None:
        write_report(args.output, {"summary": summary, "rounds": rounds}, lines)


if __name__ == "__main__":
    main()
