"""The generated README.md model card: it renders, its YAML metadata parses, and its usage code runs as written."""

import json
import pathlib
import re

import pytest
import torch
import yaml
from helpers import REPO_ROOT, tiny_model

from elmo_hf import ElmoTokenizer
from elmo_hf.hub.model_card import TEMPLATE_PATH, render_model_card, write_model_card

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
        "tags": ["elmo", "feature-extraction"],
        "license": "apache-2.0",
        "language": ["en"],
        "datasets": ["lm1b"],
    }


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


def test_write_model_card_reads_the_conversion_report_beside_it(tmp_path):
    (tmp_path / "conversion_report.json").write_text(json.dumps(REPORT), encoding="utf-8")
    path = write_model_card(tmp_path, tiny_model(), "elmo-org/elmo-original")
    assert "`elmo_2x4096_512_2048cnn_2xhighway_options.json`" in pathlib.Path(path).read_text(encoding="utf-8")


def test_the_template_at_the_repo_root_is_the_one_the_package_ships():
    assert (REPO_ROOT / "model_card.md").resolve() == TEMPLATE_PATH.resolve()
    assert TEMPLATE_PATH.parent.resolve() == (REPO_ROOT / "elmo_hf" / "hub").resolve()
    assert '"hub/model_card.md"' in (REPO_ROOT / "setup.py").read_text(encoding="utf-8")
