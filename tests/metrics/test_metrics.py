"""The shipped offline metric modules (thin wrappers of seqeval and scikit-learn), and the token-classification
example on a tag set that is not IOB."""

import json

import evaluate
import pytest
from helpers import load_script, tiny_model

from elmo_hf import ElmoTokenizer
from elmo_hf.metrics import metric_path


@pytest.fixture(scope="module")
def seqeval_f1():
    return evaluate.load(metric_path("seqeval_f1"))


def test_seqeval_f1_on_tricky_iob_sequences(seqeval_f1):
    scores = seqeval_f1.compute(
        predictions=[
            ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"],
            ["B-LOC", "I-LOC", "I-LOC", "O"],
            ["O", "O"],
        ],
        references=[
            ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "I-LOC"],
            ["B-LOC", "I-LOC", "B-LOC", "O"],
            ["O", "B-MISC"],
        ],
    )
    # Gold: PER(0-2) PER(2) LOC(4-6) | LOC(0-2) LOC(2) | MISC(1).
    # Predicted: PER(0-2) (I- after the start opens an entity) PER(2) LOC(4) ORG(5) (a type change splits) | LOC(0-3).
    assert scores["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "number": 2}
    assert scores["LOC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "number": 3}
    assert scores["ORG"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "number": 0}
    assert scores["MISC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "number": 1}
    assert scores["precision"] == pytest.approx(2 / 5) and scores["recall"] == pytest.approx(2 / 6)
    assert scores["f1"] == pytest.approx(2 * (2 / 5) * (2 / 6) / (2 / 5 + 2 / 6))
    assert scores["accuracy"] == pytest.approx(7 / 12)


def test_seqeval_f1_scores_only_accuracy_for_tags_that_are_not_iob(seqeval_f1):
    # Part-of-speech tags: entity scores would be meaningless (and a hand-rolled IOB parser once raised
    # "tag 'NNS' at position 0 is not an IOB tag").
    scores = seqeval_f1.compute(predictions=[["NNS", "VBD", "O"], ["DT"]], references=[["NNS", "VBZ", "O"], ["DT"]])
    assert scores == {"accuracy": 0.75}
    # One tag outside IOB (here X-PER) is enough: accuracy only.
    assert seqeval_f1.compute(predictions=[["X-PER", "O"]], references=[["B-PER", "O"]]) == {"accuracy": 0.5}


def test_seqeval_f1_rejects_sentences_of_different_lengths(seqeval_f1):
    with pytest.raises(ValueError, match="sentence 1: 1 predicted tags for 2 gold tags"):
        seqeval_f1.compute(predictions=[["O"], ["O"]], references=[["O"], ["O", "O"]])


def test_classification_f1_matches_hand_counts():
    scores = evaluate.load(metric_path("classification_f1")).compute(predictions=[0, 1, 1, 3], references=[0, 1, 2, 2])
    # Per-class F1 over the classes seen in either list: 0 -> 1, 1 -> 2/3, 2 -> 0, 3 -> 0.
    assert scores == {"accuracy": 0.5, "macro_f1": pytest.approx((1 + 2 / 3) / 4)}


def test_token_classification_example_trains_on_part_of_speech_tags(tmp_path):
    bilm_dir = tmp_path / "bilm"
    tiny_model().save_pretrained(bilm_dir)
    ElmoTokenizer(max_characters_per_token=20).save_pretrained(bilm_dir)
    tagged = [("the", "DT"), ("cats", "NNS"), ("sat", "VBD"), ("dogs", "NNS"), ("ran", "VBD"), (".", ".")]
    for name in ("train", "dev", "test"):
        sentences = ["\n".join(f"{word} {tag}" for word, tag in tagged[start:] + tagged[:start]) for start in range(6)]
        (tmp_path / f"{name}.conll").write_text("\n\n".join(sentences) + "\n")
    example = load_script("run_token_classification")
    example.main(
        [
            "--model_name_or_path",
            str(bilm_dir),
            "--train_file",
            str(tmp_path / "train.conll"),
            "--validation_file",
            str(tmp_path / "dev.conll"),
            "--test_file",
            str(tmp_path / "test.conll"),
            "--output_dir",
            str(tmp_path / "out"),
            "--do_train",
            "--do_eval",
            "--do_predict",
            "--num_train_epochs",
            "1",
            "--min_updates",  # the one epoch given, not the 100 that 200 updates would take
            "0",
            "--per_device_train_batch_size",
            "4",
            "--eval_strategy",
            "epoch",
            "--save_strategy",
            "no",
            "--metric_for_best_model",
            "accuracy",
            "--report_to",
            "none",
            "--use_cpu",
            "--disable_tqdm",
            "true",
            "--task_encoder_hidden_size",
            "8",
        ]
    )
    results = json.loads((tmp_path / "out" / "test_results.json").read_text())
    assert 0.0 <= results["test_accuracy"] <= 1.0
    assert not {"test_precision", "test_recall", "test_f1"} & set(results)


def test_unknown_metric_name():
    with pytest.raises(ValueError, match="unknown metric 'seqeval'"):
        metric_path("seqeval")
