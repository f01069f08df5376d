"""examples/feature_tagger_baseline.py: the scikit-learn tagger printed beside a tagger's scores."""

import json
import subprocess
import sys

from helpers import REPO_ROOT

TRAIN = [
    [("Alice", "B-PER"), ("visited", "O"), ("Paris", "B-LOC"), (".", "O")],
    [("Bob", "B-PER"), ("Smith", "I-PER"), ("likes", "O"), ("Rome", "B-LOC")],
    [("Carol", "B-PER"), ("left", "O"), ("Oslo", "B-LOC"), ("today", "O")],
]


def write_conll(path, sentences):
    path.write_text("\n\n".join("\n".join(f"{w} {t}" for w, t in s) for s in sentences) + "\n", encoding="utf-8")


def run_baseline(train, test):
    script = REPO_ROOT / "examples" / "feature_tagger_baseline.py"
    result = subprocess.run(
        [sys.executable, str(script), "--train_file", str(train), "--test_file", str(test)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result


def test_scores_tokens_and_entities_on_its_own_training_data(tmp_path):
    write_conll(tmp_path / "train.conll", TRAIN)
    result = run_baseline(tmp_path / "train.conll", tmp_path / "train.conll")
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout)
    assert scores["baseline"] == "feature-based logistic-regression tagger"
    # 12 tokens, each word unique to its tag: a logistic regression fits them all.
    assert scores["token_accuracy"] == 1.0 and scores["entity_f1"] == 1.0


def test_tags_that_are_not_iob_get_token_accuracy_only(tmp_path):
    pos = [[(word, "NOUN" if tag != "O" else "X") for word, tag in sentence] for sentence in TRAIN]
    write_conll(tmp_path / "train.conll", pos)
    write_conll(tmp_path / "test.conll", [[("Dave", "NOUN"), ("visited", "X")]])
    scores = json.loads(run_baseline(tmp_path / "train.conll", tmp_path / "test.conll").stdout)
    assert set(scores) == {"baseline", "token_accuracy"} and 0.0 <= scores["token_accuracy"] <= 1.0


def test_a_malformed_file_is_one_line(tmp_path):
    (tmp_path / "bad.conll").write_text("Alice\n", encoding="utf-8")
    result = run_baseline(tmp_path / "bad.conll", tmp_path / "bad.conll")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'bad.conll'}:1: expected a word and a tag, got 'Alice'"
    ]
