"""The generated README.md model card: it renders, huggingface_hub reads its metadata back (pipeline tag, base model,
model-index, tags), and the usage code of each class runs as written."""

import json
import pathlib
import re

import pytest
import torch
import yaml
from helpers import REPO_ROOT, WORDS, tiny_config, tiny_lm, tiny_model
from huggingface_hub import ModelCard

from elmo_hf import ElmoForSequenceClassification, ElmoForTokenClassification, ElmoTokenizer
from elmo_hf.hub.model_card import TEMPLATE_PATH, evaluation_results, render_model_card, write_model_card

pytestmark = pytest.mark.usefixtures("loopback_only")

REPORT = {
    "source_options": "elmo_2x4096_512_2048cnn_2xhighway_options.json",
    "source_weights": "elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5",
    "datasets_converted": 33,
    "verification_max_abs_difference": 4.76837158203125e-07,
    "verification_sentences": 2,
    "verification_atol": 1e-05,
    "converter": "conversion/convert_elmo_original_tf_to_hf.py",
    "elmo_hf_version": "0.1.0",
}


def metadata_and_text(card):
    assert card.startswith("---\n")
    _, metadata, text = card.split("---\n", 2)
    return yaml.safe_load(metadata), text


def python_block(card):
    blocks = re.findall(r"```python\n(.*?)```", card, re.S)
    assert len(blocks) == 1
    return blocks[0]


def test_card_metadata_parses_with_the_expected_fields():
    card = render_model_card(tiny_model(), "elmo-org/elmo-original", datasets=["lm1b"], tags=["feature-extraction"])
    metadata, _ = metadata_and_text(card)
    assert metadata == {
        "library_name": "transformers",
        "pipeline_tag": "feature-extraction",
        "tags": ["elmo", "elmo-hf", "feature-extraction"],  # "elmo", the class's model_tags, the given tags
        "license": "apache-2.0",
        "language": ["en"],
        "datasets": ["lm1b"],
    }


def tiny_head(head_class, **overrides):
    torch.manual_seed(0)
    return head_class(tiny_config(num_labels=3, id2label={0: "O", 1: "B-X", 2: "I-X"}, **overrides)).eval()


TRAINER_METRICS = {"eval_loss": 0.25, "eval_f1": 0.875, "eval_accuracy": 0.9, "eval_runtime": 1.5, "epoch": 3.0}


@pytest.mark.parametrize(
    "make,pipeline_tag,auto_class",
    [
        (tiny_model, "feature-extraction", "AutoModel"),
        (tiny_lm, "text-generation", "AutoModelForPreTraining"),
        (lambda: tiny_head(ElmoForTokenClassification), "token-classification", "AutoModelForTokenClassification"),
        (
            lambda: tiny_head(ElmoForSequenceClassification),
            "text-classification",
            "AutoModelForSequenceClassification",
        ),
    ],
)
def test_pipeline_tag_and_auto_class_follow_the_class(make, pipeline_tag, auto_class):
    model = make()
    card = render_model_card(model, "elmo-org/model")
    assert ModelCard(card).data.pipeline_tag == pipeline_tag
    assert f'{auto_class}.from_pretrained("elmo-org/model", trust_remote_code=True)' in python_block(card)
    on_a_branch = python_block(render_model_card(model, "elmo-org/model", revision="draft"))
    compile(on_a_branch, "usage", "exec")  # runs in test_usage_code_of_...; here: valid with a revision too
    assert f'{auto_class}.from_pretrained("elmo-org/model", revision="draft", trust_remote_code=True)' in on_a_branch


def test_evaluation_becomes_model_index_and_the_baseline_a_row_beside_it():
    head = tiny_head(ElmoForTokenClassification)
    head.config.bilm_name_or_path = "elmo-org/elmo-small"
    evaluation = evaluation_results(TRAINER_METRICS, task="token-classification", dataset="conll2003", split="test")
    assert evaluation["metrics"] == {"loss": 0.25, "f1": 0.875, "accuracy": 0.9}  # runtime and epoch dropped
    baseline = {"baseline": "feature-based logistic-regression tagger", "entity_f1": 0.5, "token_accuracy": 0.75}
    card = render_model_card(head, "elmo-org/tagger", evaluation=evaluation, baseline=baseline)

    data = ModelCard(card).data
    assert data.base_model == "elmo-org/elmo-small"
    assert data.model_name == "tagger"
    results = [(r.task_type, r.dataset_type, r.dataset_split, r.metric_type, r.metric_value) for r in data.eval_results]
    assert results == [
        ("token-classification", "conll2003", "test", "loss", 0.25),
        ("token-classification", "conll2003", "test", "f1", 0.875),
        ("token-classification", "conll2003", "test", "accuracy", 0.9),
    ]  # this model's results only: the baseline is another model's
    _, text = metadata_and_text(card)
    assert "| this model | f1 | 0.875 |" in text
    assert "| baseline: feature-based logistic-regression tagger | entity_f1 | 0.5 |" in text
    assert "[`elmo-org/elmo-small`](https://huggingface.co/elmo-org/elmo-small)" in text
    with pytest.raises(ValueError, match="no score to record"):
        evaluation_results({"eval_runtime": 1.0}, task="token-classification", dataset="conll2003")


def test_a_head_over_a_local_bilm_names_its_folder_in_the_text_and_has_no_base_model(tmp_path):
    tiny_model().save_pretrained(tmp_path / "elmo-english-small")
    head = ElmoForSequenceClassification.from_pretrained(tmp_path / "elmo-english-small", num_labels=2)
    assert head.config.bilm_name_or_path == "elmo-english-small"  # the folder's name, not its path
    head.save_pretrained(tmp_path / "classifier")
    reloaded = ElmoForSequenceClassification.from_pretrained(tmp_path / "classifier")
    assert reloaded.config.bilm_name_or_path == "elmo-english-small"  # a trained head keeps it

    card = render_model_card(reloaded, "elmo-org/classifier")
    assert ModelCard(card).data.base_model is None
    assert "This head was trained on the biLM `elmo-english-small`" in card
    assert "model-index" not in card and "## Evaluation" not in card


def test_model_tags_are_per_model_and_reach_the_card():
    model, other = tiny_model(), tiny_model()
    model.add_model_tags(["ner"])
    assert model.model_tags == ["elmo", "elmo-hf", "ner"] and other.model_tags == ["elmo", "elmo-hf"]
    assert ModelCard(render_model_card(model, "elmo-org/m", tags=["x"])).data.tags == ["elmo", "elmo-hf", "ner", "x"]


def test_card_describes_the_architecture_provenance_parity_and_citation():
    model = tiny_model()
    card = render_model_card(model, "elmo-org/elmo-original", report=REPORT, training_data="Some corpus.")
    _, text = metadata_and_text(card)
    assert "$" not in card  # every placeholder was filled
    assert f"| parameters | {model.num_parameters():,} |" in text
    assert "| biLSTM | 2 layers, cell 16, projection 8, skip connections: yes |" in text
    assert "| character CNN | filters (width, count): (1, 4), (2, 8), (3, 8); 20 in total, relu |" in text
    assert "3 tensors of (sentences, words + 2, 16)" in text
    assert "`elmo_2x4096_512_2048cnn_2xhighway_weights.hdf5` (33 hdf5 datasets)" in text
    assert "on 2 sentences: the largest absolute difference was 4.77e-07 (the conversion fails above 1e-05)" in text
    assert "Some corpus." in text
    assert "title = {Deep Contextualized Word Representations}" in text and "doi = {10.18653/v1/N18-1202}" in text


def test_card_without_a_conversion_report_says_so():
    _, text = metadata_and_text(render_model_card(tiny_model(), "elmo-org/fine-tuned"))
    assert "no record of its origin was given" in text and "Not measured for this checkpoint." in text


def test_usage_code_in_the_card_runs_as_written(tmp_path):
    """Against a local checkpoint, in this process (where elmo_hf's registered classes serve it); test_hub.py
    runs the card of a pushed repo in a process without elmo_hf."""
    model, tokenizer = tiny_model(), ElmoTokenizer(max_characters_per_token=20)
    checkpoint = tmp_path / "elmo-tiny"
    model.save_pretrained(checkpoint)
    tokenizer.save_pretrained(checkpoint)
    write_model_card(checkpoint, model, str(checkpoint))

    namespace = {}
    exec(python_block((checkpoint / "README.md").read_text(encoding="utf-8")), namespace)  # noqa: S102

    with torch.no_grad():
        expected = model(**namespace["batch"]).last_hidden_state
    assert namespace["top"].shape == (2, 6, 16)
    torch.testing.assert_close(namespace["top"], expected, rtol=0, atol=1e-6)
    assert torch.equal(namespace["first_sentence"], namespace["top"][0, 1:-1])


def test_usage_code_of_the_heads_and_the_language_model_runs_as_written(tmp_path):
    tokenizer = ElmoTokenizer(max_characters_per_token=20)
    for name, model in (
        ("tagger", tiny_head(ElmoForTokenClassification)),
        ("classifier", tiny_head(ElmoForSequenceClassification)),
        ("lm", tiny_lm()),
    ):
        checkpoint = tmp_path / name
        model.save_pretrained(checkpoint)
        tokenizer.save_pretrained(checkpoint)
        (checkpoint / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")
        namespace = {}
        exec(python_block(render_model_card(model, str(checkpoint))), namespace)  # noqa: S102
        batch = namespace["batch"]
        with torch.no_grad():
            if name == "tagger":
                logits = model(**batch).logits
                assert [len(tags) for tags in namespace["tags"]] == [4, 3]  # one per word
                best = [
                    [model.config.id2label[int(t)] for t in row[1 : n + 1].argmax(-1)] for row, n in zip(logits, (4, 3))
                ]
                assert namespace["tags"] == best
            elif name == "classifier":
                expected = [model.config.id2label[int(i)] for i in model(**batch).logits.argmax(-1)]
                assert namespace["labels"] == expected
            else:
                labels = namespace["labels"]
                assert labels[1].tolist() == [0, 2, 2, 2, 1, -100]  # <S>, three unknown words, </S>, padding
                expected = model(**batch, labels=labels).loss
                torch.testing.assert_close(namespace["perplexity"], torch.exp(expected))


def test_write_model_card_reads_the_conversion_report_beside_it(tmp_path):
    (tmp_path / "conversion_report.json").write_text(json.dumps(REPORT), encoding="utf-8")
    path = write_model_card(tmp_path, tiny_model(), "elmo-org/elmo-original")
    assert "`elmo_2x4096_512_2048cnn_2xhighway_options.json`" in pathlib.Path(path).read_text(encoding="utf-8")


def test_the_template_at_the_repo_root_is_the_one_the_package_ships():
    assert (REPO_ROOT / "model_card.md").resolve() == TEMPLATE_PATH.resolve()
    assert TEMPLATE_PATH.parent.resolve() == (REPO_ROOT / "elmo_hf" / "hub").resolve()
    assert '"hub/model_card.md"' in (REPO_ROOT / "setup.py").read_text(encoding="utf-8")
