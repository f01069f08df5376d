"""ELMo's gain seed by seed from saved `examples/downstream_benchmark.py` results, pooled across files: rows split
between runs (`--rows all` in one, `--rows without_elmo` in another) and seeds split between runs (seeds 0-5 and
6-11) are joined by seed, then each task's gain on its full training data is printed as the benchmark prints it.

    python recipes/english-bilm/elmo_gain.py outputs/eval/sentiment/results.json \\
        outputs/eval/sentiment-seeds6to11/results.json

A row's seed given by two files is an error, as are files of different models.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
import downstream_benchmark  # noqa: E402


def pooled_results(paths):
    """One results dict whose full-data rows hold every file's seeds of that row, in seed order."""
    by_seed = {}  # (task, row) -> {seed: {"dev": ..., "test": ...}}
    models = set()
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            results = json.load(handle)
        models.add(results["model"])
        for task, figures in results["tasks"].items():
            for row, figure in figures.get("rows", {}).items():
                scores = by_seed.setdefault((task, row), {})
                for index, seed in enumerate(results["settings"]["seeds"]):
                    if seed in scores:
                        raise SystemExit(f"{path}: seed {seed} of {task}/{row} is in an earlier file too")
                    scores[seed] = {split: figure[split]["seeds"][index] for split in ("dev", "test")}
    if len(models) > 1:
        raise SystemExit(f"the files are of different models: {sorted(models)}")
    tasks = {}
    for (task, row), scores in by_seed.items():
        seeds = sorted(scores)
        tasks.setdefault(task, {"rows": {}, "seeds": {}})["rows"][row] = downstream_benchmark.split_figures(
            [scores[seed] for seed in seeds]
        )
        tasks[task]["seeds"][row] = seeds
    for task, figures in tasks.items():
        pair = [figures["seeds"].get(row) for row in ("without_elmo", "all")]
        if None not in pair and pair[0] != pair[1]:
            raise SystemExit(f"{task}: the rows without_elmo and all have different seeds: {pair[0]} and {pair[1]}")
    return {"tasks": tasks}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="results.json files of downstream_benchmark.py")
    args = parser.parse_args(argv)
    pooled = pooled_results(args.results)
    for task, figures in pooled["tasks"].items():
        for row, figure in figures["rows"].items():
            test, dev = figure["test"], figure["dev"]
            print(
                f"{task} {row}: seeds {figures['seeds'][row]}; test {100 * test['mean']:.2f} ± "
                f"{100 * test['std']:.2f}, dev {100 * dev['mean']:.2f} ± {100 * dev['std']:.2f}"
            )
    print("\n".join(downstream_benchmark.gain_lines(pooled)))
    return pooled


if __name__ == "__main__":
    main()
