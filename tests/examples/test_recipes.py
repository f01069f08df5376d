"""The two recipes of examples/README.md (`<!-- recipe: NAME -->`), run as written from the project root on tiny
slices: CSV `text`/`label` files for text classification, `word<TAB>tag` CoNLL files for tagging with a tag set of
the test's own. Each must write `{output_dir}/test_results.json` with `test_accuracy` as a fraction."""

import json
import random
import shlex
import subprocess
import sys

import pytest
from helpers import REPO_ROOT, load_script

RECIPES = ("text-classification", "token-classification")


def recipe(name):
    """The fenced command after `<!-- recipe: NAME -->` in examples/README.md, as one line."""
    lines = (REPO_ROOT / "examples" / "README.md").read_text(encoding="utf-8").splitlines()
    start = lines.index(f"<!-- recipe: {name} -->")
    fence = next(index for index in range(start + 1, len(lines)) if lines[index].startswith("```"))
    end = next(index for index in range(fence + 1, len(lines)) if lines[index].startswith("```"))
    return " ".join(line.rstrip("\\").strip() for line in lines[fence + 1 : end])


def write_splits(directory, name):
    """Tiny train/validation/test files of a task whose answer is in one word."""
    rng = random.Random(0)
    words = ["the", "film", "was", "very", "a", "plot", "and", "cast"]
    paths = {}
    for split, count in (("train", 24), ("validation", 8), ("test", 8)):
        rows = []
        for _ in range(count):
            label = rng.randint(0, 1)
            sentence = [rng.choice(words) for _ in range(rng.randint(2, 6))] + [["dull", "great"][label]]
            rng.shuffle(sentence)
            rows.append((sentence, label))
        if name == "text-classification":
            path = directory / f"{split}.csv"
            path.write_text("text,label\n" + "".join(f"{' '.join(s)},{['neg', 'pos'][y]}\n" for s, y in rows))
        else:  # tags of the test's own: ADJ for the cue word, X for the rest
            path = directory / f"{split}.conll"
            path.write_text(
                "\n\n".join("\n".join(f"{w}\t{'ADJ' if w in ('dull', 'great') else 'X'}" for w in s) for s, _ in rows)
                + "\n"
            )
        paths[f"{split}_file"] = str(path)
    return paths


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_runs_as_written_on_a_tiny_slice(tmp_path, name):
    command = recipe(name)
    for placeholder in ("{train_file}", "{validation_file}", "{test_file}", "{output_dir}"):
        assert placeholder in command, placeholder
    arguments = shlex.split(command.format(output_dir=tmp_path / "out", **write_splits(tmp_path, name)))
    assert arguments[0] == "python"
    # As written, 24 sentences (one batch an epoch) would train 200 epochs, each scored and saved: 8 keep it short.
    arguments += ["--min_updates", "8"]
    subprocess.run([sys.executable, *arguments[1:]], cwd=REPO_ROOT, check=True, capture_output=True, text=True)
    results = json.loads((tmp_path / "out" / "test_results.json").read_text())
    assert 0.0 <= results["test_accuracy"] <= 1.0


@pytest.mark.parametrize("name, task", [("text-classification", "sentiment"), ("token-classification", "pos")])
def test_the_recipe_trains_as_the_downstream_benchmark_measures_it(name, task):
    measured = load_script("downstream_benchmark").RECIPE[task]
    arguments = shlex.split(recipe(name))
    options = {arguments[i]: arguments[i + 1] for i in range(len(arguments) - 1) if arguments[i].startswith("--")}
    assert float(options["--num_train_epochs"]) == measured["epochs"]
    assert float(options["--learning_rate"]) == measured["learning_rate"]
    assert float(options.get("--task_word_dropout", 0.0)) == measured["task_word_dropout"]
