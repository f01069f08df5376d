#!/usr/bin/env python
"""Words to character ids, as the embedding benchmark times them before every batch: `ElmoTokenizer` of this tree, of
an earlier revision, and allennlp's `batch_to_ids`, each in its own process on the same sentences.

    python benchmarks/benchmark_tokenizer.py --revisions . HEAD~5 --peer-venv PEERVENV [--rounds 3]

The workload is `benchmark_elmo.py`'s (the shared harness's 512 sentences, length-sorted batches of 32, tensors out).
Each process tokenizes the workload `--passes` times; the first pass starts with the tokenizer freshly made (for
elmo_hf: an empty cache of word rows), the others reuse it, as the benchmark's repetitions do. The sides take turns
for `--rounds` rounds and the best round per side and pass is kept. Prints microseconds per word and words/s.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from benchmark_utils import PEER_DIR, machine_line

REPO = pathlib.Path(__file__).resolve().parent.parent

# Run in each side's process: tokenizes the workload --passes times, prints seconds per pass as JSON.
WORKER = """
import json, sys, time
sys.path.insert(0, {peer_dir!r})
if {allennlp}:
    import allennlp_elmo_shim  # noqa: F401
    from allennlp.modules.elmo import batch_to_ids
    tokenize = lambda sentences: batch_to_ids(sentences)
else:
    import elmo_hf
    from elmo_hf import ElmoTokenizer
    print("elmo_hf from", __import__("os").path.dirname(__import__("os").path.dirname(elmo_hf.__file__)))
    tokenizer = ElmoTokenizer()
    tokenize = lambda sentences: tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
import torch
from workload import make_workload
torch.set_num_threads(1)
sentences = sorted(make_workload({sentences}, seed=0), key=len)
batches = [sentences[start : start + 32] for start in range(0, len(sentences), 32)]
seconds = []
for _ in range({passes}):
    start = time.perf_counter()
    for batch in batches:
        tokenize(batch)
    seconds.append(time.perf_counter() - start)
print(json.dumps({{"seconds": seconds, "words": sum(len(sentence) for sentence in sentences)}}))
"""


def run_side(python, allennlp, source, args):
    code = WORKER.format(peer_dir=str(args.peer_dir), allennlp=allennlp, sentences=args.sentences, passes=args.passes)
    environment = {**os.environ, "PYTHONPATH": str(source) if source else ""}
    # Run from the side's own tree: `python -c` puts the working directory first on the import path.
    output = subprocess.run(
        [python, "-c", code], env=environment, cwd=source or tempfile.gettempdir(), capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    if source and f"elmo_hf from {source}" not in output.stdout:
        raise RuntimeError(f"the worker did not import elmo_hf from {source}: {output.stdout[-300:]}")
    return json.loads(output.stdout.strip().splitlines()[-1])


def checkout(revision, work_dir):
    """A folder with `revision`'s tree (this checkout for ".")."""
    if revision == ".":
        return REPO
    folder = pathlib.Path(work_dir) / revision.replace("/", "_").replace("~", "-")
    if not folder.exists():
        folder.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--revisions", nargs="+", default=["."], help="elmo_hf revisions ('.' = this checkout)")
    parser.add_argument("--peer-venv", type=pathlib.Path, help="allennlp's venv (../shared/peer/README.md)")
    parser.add_argument("--peer-dir", type=pathlib.Path, default=PEER_DIR)
    parser.add_argument("--sentences", type=int, default=512)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work-dir", default=os.path.join(tempfile.gettempdir(), "elmo-bench-tokenizer"))
    args = parser.parse_args()
    sides = {
        f"elmo_hf {revision}": (sys.executable, False, checkout(revision, args.work_dir)) for revision in args.revisions
    }
    if args.peer_venv is not None:
        sides["allennlp batch_to_ids"] = (str(args.peer_venv / "bin" / "python"), True, None)
    print("machine at start:", machine_line())
    best = {}
    for round_index in range(args.rounds):
        for name, (python, allennlp, source) in sides.items():
            result = run_side(python, allennlp, source, args)
            words = result["words"]
            print(
                f"round {round_index} {name}: "
                + ", ".join(f"{s / words * 1e6:.2f}" for s in result["seconds"])
                + " us/word"
            )
            passes = best.setdefault(name, [float("inf")] * args.passes)
            best[name] = [min(old, new / words * 1e6) for old, new in zip(passes, result["seconds"])]
    print(f"\nbest of {args.rounds} rounds, microseconds per word (words/s), first pass / later passes:")
    for name, passes in best.items():
        later = min(passes[1:]) if len(passes) > 1 else passes[0]
        print(f"  {name:32s} {passes[0]:6.2f} ({1e6 / passes[0]:9,.0f}) / {later:6.2f} ({1e6 / later:9,.0f})")
    print("machine at end:", machine_line())


if __name__ == "__main__":
    main()
