"""Publishing and loading checkpoints through a Hub, against the loopback Hub of `hub_server.py` (127.0.0.1 only)."""

import json
import os
import socket
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch
from helpers import REPO_ROOT, tiny_config, tiny_lm, tiny_model
from hub_server import NonLoopbackConnection, client_prelude, git_blob_id, loopback_guard
from huggingface_hub import HfApi, ModelCard, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer
from transformers.utils import cached_file

import elmo_hf
from conversion import convert_all_published
from conversion import convert_elmo_original_tf_to_hf as converter
from elmo_hf import ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from elmo_hf.convert import convert_bilm_tf, convert_common
from elmo_hf.hub.model_card import CARD_MARKER, evaluation_results

pytestmark = pytest.mark.usefixtures("loopback_only")

TESTS_DIR = REPO_ROOT / "tests"  # hub_server.py, which the child processes import
CODE_FILES = {
    "configuration_elmo.py",
    "modeling_elmo.py",
    "cpu_kernels.py",
    "cuda_graphs.py",
    "cuda_kernels.py",
    "lstm_training_kernel.py",
    "tokenization_elmo.py",
    "char_ids.py",
    "packed_steps.py",
    "lstm_cell.py",
    "lstm_paths.py",
    "weight_cache.py",
    "triton_lstm_kernels.py",
}
CONVERTED_FILES = {
    ".gitattributes",
    "README.md",
    "config.json",
    "model.safetensors",
    "tokenizer_config.json",
    "conversion_report.json",
} | CODE_FILES

# A child process in which `elmo_hf` cannot be imported runs the usage code of the repo's README exactly as
# written, then saves what it computed.
LOAD_WITHOUT_ELMO_HF = """
sys.modules["elmo_hf"] = None  # importing elmo_hf now raises: only the code shipped in the repo can run
import re, torch
from huggingface_hub import hf_hub_download
from safetensors.torch import save_file
card = open(hf_hub_download({repo_id!r}, "README.md"), encoding="utf-8").read()
exec(re.search(r"```python\\n(.*?)```", card, re.S).group(1))
assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
assert type(tokenizer).__module__.startswith("transformers_modules."), type(tokenizer).__module__
save_file({{"layers": torch.stack(layers, 1).contiguous(), "input_ids": batch["input_ids"],
           "attention_mask": batch["attention_mask"]}}, {output!r})
"""


def write_random_bilm_tf_files(directory, stem, config, seed=0):
    """options.json and an hdf5 weight file in the published bilm-tf layout, with random weights."""
    rng = np.random.default_rng(seed)
    with open(directory / f"{stem}_options.json", "w", encoding="utf-8") as options_file:
        json.dump(convert_bilm_tf.options_from_config(config), options_file)
    with h5py.File(directory / f"{stem}_weights.hdf5", "w") as weight_file:
        for entry in convert_bilm_tf.hdf5_key_table(config):
            if entry.source not in weight_file:
                weight_file[entry.source] = (0.5 * rng.standard_normal(entry.source_shape)).astype(np.float32)
    return directory / f"{stem}_options.json", directory / f"{stem}_weights.hdf5"


def run_child(code, env, tmp_path):
    """Run `code` in a fresh Python with `env`, outside the repository, behind the loopback guard."""
    child_env = {name: value for name, value in env.items() if name != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", client_prelude(TESTS_DIR) + code],
        env=child_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def layers_of(model, batch):
    with torch.no_grad():
        return torch.stack(model(**batch, output_hidden_states=True).hidden_states, 1)


def same_weights(model, other):
    state, other_state = model.state_dict(), other.state_dict()
    return state.keys() == other_state.keys() and all(torch.equal(state[name], other_state[name]) for name in state)


def repo_files(repo_id, revision=None):
    return set(HfApi().list_repo_files(repo_id, revision=revision))


def test_converted_checkpoint_loads_by_repo_id_without_elmo_hf_then_offline(loopback_hub, tmp_path):
    options, weights = write_random_bilm_tf_files(tmp_path, "elmo_random", tiny_config())
    output_dir = tmp_path / "converted"
    converter.main(
        [
            "--options",
            str(options),
            "--weights",
            str(weights),
            "--output-dir",
            str(output_dir),
            "--push-to-hub",
            "elmo-org/elmo-tiny",
        ]
    )

    assert repo_files("elmo-org/elmo-tiny") == CONVERTED_FILES
    config = json.loads(open(hf_hub_download("elmo-org/elmo-tiny", "config.json")).read())
    assert config["auto_map"] == {"AutoConfig": "configuration_elmo.ElmoConfig", "AutoModel": "modeling_elmo.ElmoModel"}
    tokenizer_config = json.loads(open(hf_hub_download("elmo-org/elmo-tiny", "tokenizer_config.json")).read())
    assert tokenizer_config["auto_map"]["AutoTokenizer"][0] == "tokenization_elmo.ElmoTokenizer"

    env = dict(os.environ)
    run_child(
        LOAD_WITHOUT_ELMO_HF.format(repo_id="elmo-org/elmo-tiny", output=str(tmp_path / "online.st")), env, tmp_path
    )
    online = load_file(tmp_path / "online.st")
    local = ElmoModel.from_pretrained(output_dir).eval()
    expected = layers_of(local, {"input_ids": online["input_ids"], "attention_mask": online["attention_mask"]})
    assert online["layers"].shape == (2, 3, 6, 16)  # (sentences, layers, words + 2, 2 * projection_dim)
    assert torch.equal(online["layers"], expected)

    served = len(loopback_hub.requests)
    env["HF_HUB_OFFLINE"] = "1"
    run_child(
        LOAD_WITHOUT_ELMO_HF.format(repo_id="elmo-org/elmo-tiny", output=str(tmp_path / "offline.st")), env, tmp_path
    )
    assert len(loopback_hub.requests) == served  # the offline child never asked the Hub
    assert torch.equal(load_file(tmp_path / "offline.st")["layers"], expected)


def test_push_to_hub_of_model_and_tokenizer_and_a_second_push_updates_the_revision(loopback_hub):
    first_model, tokenizer = tiny_model(seed=0), ElmoTokenizer(max_characters_per_token=20)
    first = first_model.push_to_hub("elmo-org/pushed")
    tokenizer.push_to_hub("elmo-org/pushed")
    assert (
        repo_files("elmo-org/pushed")
        == {".gitattributes", "README.md", "config.json", "model.safetensors", "tokenizer_config.json"} | CODE_FILES
    )

    metadata = get_hf_file_metadata(hf_hub_url("elmo-org/pushed", "config.json"))
    assert metadata.commit_hash == HfApi().repo_info("elmo-org/pushed").sha  # X-Repo-Commit
    assert metadata.etag == git_blob_id(loopback_hub.repo("elmo-org/pushed").resolve("main").files["config.json"])

    second_model = tiny_model(seed=1)
    second = second_model.push_to_hub("elmo-org/pushed")
    assert second.oid != first.oid and HfApi().repo_info("elmo-org/pushed").sha == second.oid
    assert [commit.commit_id for commit in HfApi().list_repo_commits("elmo-org/pushed")][0] == second.oid

    latest = AutoModel.from_pretrained("elmo-org/pushed")
    assert same_weights(latest, second_model)
    earlier = AutoModel.from_pretrained("elmo-org/pushed", revision=first.oid)
    assert same_weights(earlier, first_model) and not same_weights(earlier, latest)
    loaded_tokenizer = AutoTokenizer.from_pretrained("elmo-org/pushed")
    assert isinstance(loaded_tokenizer, ElmoTokenizer) and loaded_tokenizer.max_characters_per_token == 20


def test_push_to_hub_of_a_new_repo_publishes_the_elmo_model_card(loopback_hub):
    model = tiny_model(seed=0)
    model.push_to_hub("elmo-org/fresh")
    card = open(hf_hub_download("elmo-org/fresh", "README.md"), encoding="utf-8").read()
    assert "## Architecture" in card and f"{model.num_parameters():,}" in card
    assert 'AutoModel.from_pretrained("elmo-org/fresh", trust_remote_code=True)' in card
    assert "This checkpoint was not written by the converter" in card
    assert "automatically generated" not in card  # not transformers' generic card
    assert ModelCard(card).data.pipeline_tag == "feature-extraction"


def test_cards_of_a_bilm_a_tagger_and_a_classifier_read_back_from_the_hub(loopback_hub, tmp_path):
    """The biLM (a language model) on the Hub; a tagger built on it by Hub id and a classifier built on a local
    folder, each pushed with an evaluation: ModelCard.load reads back the pipeline tag, the biLM, model-index, tags."""
    perplexity = evaluation_results({"eval_perplexity": 42.5}, task="text-generation", dataset="news", split="test")
    tiny_lm().push_to_hub("elmo-org/bilm", card={"evaluation": perplexity})
    tiny_model().save_pretrained(tmp_path / "elmo-english-small")
    tagger = ElmoForTokenClassification.from_pretrained("elmo-org/bilm", num_labels=3)
    tagger.add_model_tags("ner")
    classifier = ElmoForSequenceClassification.from_pretrained(tmp_path / "elmo-english-small", num_labels=2)
    metrics = {"eval_loss": 0.5, "eval_f1": 0.75, "eval_runtime": 2.0, "epoch": 1.0}
    baseline = {"baseline": "feature-based logistic-regression tagger", "entity_f1": 0.5}
    tagger.push_to_hub(
        "elmo-org/tagger",
        card={
            "evaluation": evaluation_results(metrics, task="token-classification", dataset="conll2003", split="test"),
            "baseline": baseline,
        },
    )
    classifier.push_to_hub(
        "elmo-org/classifier",
        tags=["sentiment"],
        card={"evaluation": evaluation_results(metrics, task="text-classification", dataset="sst2")},
    )

    bilm, tagged, classified = (ModelCard.load(f"elmo-org/{name}") for name in ("bilm", "tagger", "classifier"))
    for card in (bilm, tagged, classified):
        card.validate()  # the Hub's own check of the metadata (the loopback Hub's /api/validate-yaml)
    assert (bilm.data.pipeline_tag, bilm.data.base_model) == ("text-generation", None)
    assert [(r.task_type, r.metric_type, r.metric_value) for r in bilm.data.eval_results] == [
        ("text-generation", "perplexity", 42.5)
    ]
    assert bilm.data.tags == ["elmo", "elmo-hf"]
    assert (tagged.data.pipeline_tag, tagged.data.base_model) == ("token-classification", "elmo-org/bilm")
    assert tagged.data.tags == ["elmo", "elmo-hf", "ner"]
    assert [
        (r.task_type, r.dataset_type, r.dataset_split, r.metric_type, r.metric_value) for r in tagged.data.eval_results
    ] == [
        ("token-classification", "conll2003", "test", "loss", 0.5),
        ("token-classification", "conll2003", "test", "f1", 0.75),
    ]
    assert "| baseline: feature-based logistic-regression tagger | entity_f1 | 0.5 |" in tagged.text
    assert 'AutoModelForTokenClassification.from_pretrained("elmo-org/tagger"' in tagged.text
    assert (classified.data.pipeline_tag, classified.data.base_model) == ("text-classification", None)
    assert "the biLM `elmo-english-small`" in classified.text  # not a Hub id: named in the text
    assert classified.data.tags == ["elmo", "elmo-hf", "sentiment"]
    assert [r.metric_type for r in classified.data.eval_results] == ["loss", "f1"]

    # A push without card options keeps the card elmo-hf wrote, evaluation included; a reload keeps the biLM.
    reloaded = ElmoForTokenClassification.from_pretrained("elmo-org/tagger")
    assert reloaded.config.bilm_name_or_path == "elmo-org/bilm"
    reloaded.push_to_hub("elmo-org/tagger", commit_message="again")
    assert ModelCard.load("elmo-org/tagger").data.eval_results == tagged.data.eval_results


def test_push_to_hub_with_create_pr_leaves_main_untouched(loopback_hub):
    commit = tiny_model().push_to_hub("elmo-org/proposed", create_pr=True)
    assert repo_files("elmo-org/proposed") == {".gitattributes"}  # main: not even README.md
    assert commit.pr_revision == "refs/pr/1" and commit.pr_url.endswith("/elmo-org/proposed/discussions/1")
    assert {"README.md", "config.json", "model.safetensors"} <= repo_files("elmo-org/proposed", revision="refs/pr/1")
    card = open(hf_hub_download("elmo-org/proposed", "README.md", revision="refs/pr/1"), encoding="utf-8").read()
    assert CARD_MARKER in card


def test_save_pretrained_with_push_to_hub_publishes_the_same_card(loopback_hub, tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path / "saved", push_to_hub=True, repo_id="elmo-org/saved", revision="draft")
    assert repo_files("elmo-org/saved") == {".gitattributes"}  # pushed to the branch only
    card = open(hf_hub_download("elmo-org/saved", "README.md", revision="draft"), encoding="utf-8").read()
    assert CARD_MARKER in card and "automatically generated" not in card
    assert 'AutoModel.from_pretrained("elmo-org/saved", revision="draft", trust_remote_code=True)' in card
    assert ModelCard(card).data.tags == ["elmo", "elmo-hf"]
    assert (tmp_path / "saved" / "README.md").read_text(encoding="utf-8") == card


def test_push_to_hub_keeps_the_model_card_of_a_converted_repo(loopback_hub, tmp_path):
    options, weights = write_random_bilm_tf_files(tmp_path, "elmo_random", tiny_config())
    converter.main(
        [
            "--options",
            str(options),
            "--weights",
            str(weights),
            "--output-dir",
            str(tmp_path / "out"),
            "--push-to-hub",
            "elmo-org/elmo-tiny",
        ]
    )
    card = open(hf_hub_download("elmo-org/elmo-tiny", "README.md"), encoding="utf-8").read()

    ElmoModel.from_pretrained(tmp_path / "out").push_to_hub("elmo-org/elmo-tiny", commit_message="fine-tuned")
    again = open(hf_hub_download("elmo-org/elmo-tiny", "README.md"), encoding="utf-8").read()
    assert "## Provenance" in again and "elmo_random_weights.hdf5" in again
    assert again.split("---")[2] == card.split("---")[2]  # the card's text is unchanged; only metadata is re-dumped


def test_conversion_to_a_private_repo_and_a_branch(loopback_hub, tmp_path):
    options, weights = write_random_bilm_tf_files(tmp_path, "elmo_random", tiny_config())
    converter.main(
        [
            "--options",
            str(options),
            "--weights",
            str(weights),
            "--output-dir",
            str(tmp_path / "out"),
            "--push-to-hub",
            "elmo-org/secret",
            "--private",
            "--revision",
            "converted",
        ]
    )

    assert loopback_hub.repo("elmo-org/secret").private
    assert repo_files("elmo-org/secret") == {".gitattributes"}  # main is untouched
    assert repo_files("elmo-org/secret", revision="converted") == CONVERTED_FILES
    card = open(hf_hub_download("elmo-org/secret", "README.md", revision="converted"), encoding="utf-8").read()
    assert 'from_pretrained("elmo-org/secret", revision="converted", trust_remote_code=True)' in card
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("elmo-org/secret", "config.json", revision="converted", token=False)


def test_push_to_hub_needs_a_namespaced_repo_id(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:  # before any file is read
        converter.main(
            ["--options", "o.json", "--weights", "w.hdf5", "--output-dir", str(tmp_path), "--push-to-hub", "elmo-tiny"]
        )
    assert exit_info.value.code == 2
    expected = "error: --push-to-hub: takes a repo id of the form namespace/name, got 'elmo-tiny'\n"
    assert capsys.readouterr().err == expected
    with pytest.raises(ValueError, match="namespace/name, got 'elmo-tiny'"):
        convert_common.check_repo_id("elmo-tiny")


def test_missing_repo_file_or_revision_give_huggingface_hub_errors(loopback_hub):
    tiny_model().push_to_hub("elmo-org/exists")
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("elmo-org/missing", "config.json")
    with pytest.raises(EntryNotFoundError):
        hf_hub_download("elmo-org/exists", "missing.json")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("elmo-org/exists", "config.json", revision="no-such-branch")
    with pytest.raises(OSError, match="elmo-org/missing is not a local folder and is not a valid model") as error:
        AutoModel.from_pretrained("elmo-org/missing")
    assert isinstance(error.value.__cause__, RepositoryNotFoundError)
    with pytest.raises(OSError, match="elmo-org/exists does not appear to have a file named missing.json"):
        cached_file("elmo-org/exists", "missing.json")


def test_convert_all_published_models_in_one_command(loopback_hub, tmp_path):
    sizes = {
        "elmo_2x1024_128_2048cnn_1xhighway": tiny_config(lstm_dim=12, num_highway_layers=1),
        "elmo_2x2048_256_2048cnn_1xhighway": tiny_config(lstm_dim=16, num_highway_layers=1),
        "elmo_2x4096_512_2048cnn_2xhighway": tiny_config(lstm_dim=20, num_highway_layers=2),
        "elmo_2x4096_512_2048cnn_2xhighway_5.5B": tiny_config(lstm_dim=24, num_highway_layers=2),
    }
    source = tmp_path / "published"
    source.mkdir()
    for seed, (stem, config) in enumerate(sizes.items()):
        write_random_bilm_tf_files(source, stem, config, seed)

    convert_all_published.main(
        ["--input-dir", str(source), "--output-dir", str(tmp_path / "out"), "--push-to-hub-namespace", "elmo-org"]
    )

    repos = {
        "elmo-small": "elmo_2x1024_128_2048cnn_1xhighway",
        "elmo-medium": "elmo_2x2048_256_2048cnn_1xhighway",
        "elmo-original": "elmo_2x4096_512_2048cnn_2xhighway",
        "elmo-original-5.5b": "elmo_2x4096_512_2048cnn_2xhighway_5.5B",
    }
    assert sorted(repo_id for _, repo_id in loopback_hub.repos) == sorted(f"elmo-org/{name}" for name in repos)
    for name, stem in repos.items():
        assert repo_files(f"elmo-org/{name}") == CONVERTED_FILES
        report = json.loads(open(hf_hub_download(f"elmo-org/{name}", "conversion_report.json")).read())
        assert (report["source_options"], report["source_weights"]) == (f"{stem}_options.json", f"{stem}_weights.hdf5")
        config = json.loads(open(hf_hub_download(f"elmo-org/{name}", "config.json")).read())
        assert (config["lstm_dim"], config["num_highway_layers"]) == (
            sizes[stem].lstm_dim,
            sizes[stem].num_highway_layers,
        )
        card = open(hf_hub_download(f"elmo-org/{name}", "README.md"), encoding="utf-8").read()
        assert f'from_pretrained("elmo-org/{name}", trust_remote_code=True)' in card
    five_billion = open(hf_hub_download("elmo-org/elmo-original-5.5b", "README.md"), encoding="utf-8").read()
    assert "Wikipedia" in five_billion and "datasets: []" in five_billion


def test_convert_all_published_checks_every_file_before_converting(tmp_path):
    for stem in ("elmo_2x1024_128_2048cnn_1xhighway", "elmo_2x2048_256_2048cnn_1xhighway"):
        write_random_bilm_tf_files(tmp_path, stem, tiny_config())
    with pytest.raises(ValueError, match="missing published files.*'elmo_2x4096_512_2048cnn_2xhighway_options.json'"):
        convert_all_published.convert_all(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()

    results = convert_all_published.convert_all(tmp_path, tmp_path / "out", names=["small"])
    assert list(results) == ["small"] and os.listdir(tmp_path / "out") == ["elmo-small"]


def test_trainer_push_to_hub_loads_back(loopback_hub, tmp_path):
    from transformers import Trainer, TrainingArguments

    model = tiny_model(seed=2)
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"),
        push_to_hub=True,
        hub_model_id="elmo-org/trained",
        report_to="none",
        use_cpu=True,
    )
    trainer = Trainer(model=model, args=args, processing_class=ElmoTokenizer(max_characters_per_token=20))
    commit = trainer.push_to_hub()

    assert {"config.json", "model.safetensors", "README.md", "tokenizer_config.json"} <= repo_files("elmo-org/trained")
    assert HfApi().repo_info("elmo-org/trained").sha == commit.oid
    assert same_weights(AutoModel.from_pretrained("elmo-org/trained"), model)


@pytest.mark.parametrize(
    "head_name,auto_name",
    [
        ("ElmoForTokenClassification", "AutoModelForTokenClassification"),
        ("ElmoForSequenceClassification", "AutoModelForSequenceClassification"),
    ],
)
def test_trainer_pushes_a_fine_tuned_head_that_loads_with_its_auto_class(loopback_hub, tmp_path, head_name, auto_name):
    import transformers
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(0)
    head = getattr(elmo_hf, head_name)(tiny_config(num_labels=3)).eval()
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"), push_to_hub=True, hub_model_id="elmo-org/head", report_to="none", use_cpu=True
    )
    Trainer(model=head, args=args, processing_class=ElmoTokenizer(max_characters_per_token=20)).push_to_hub()

    loaded = getattr(transformers, auto_name).from_pretrained("elmo-org/head").eval()
    assert type(loaded).__name__ == head_name
    assert same_weights(loaded, head)


def test_the_examples_card_arguments_push_the_evaluated_head_with_its_card(loopback_hub, tmp_path):
    from transformers import Trainer, TrainingArguments

    from elmo_hf.hub.model_card import ModelCardArguments

    tiny_model().push_to_hub("elmo-org/bilm")
    head = ElmoForTokenClassification.from_pretrained("elmo-org/bilm", num_labels=3)
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"), push_to_hub=True, hub_model_id="elmo-org/tagger", report_to="none"
    )
    card_args = ModelCardArguments(card_dataset="CoNLL-2003", card_dataset_id="eriktks/conll2003")
    assert card_args.take_push(args) and not args.push_to_hub  # the Trainer itself pushes nothing
    trainer = Trainer(model=head, args=args, processing_class=ElmoTokenizer(max_characters_per_token=20))
    metrics = {"eval_f1": 0.625, "eval_runtime": 0.5}
    card_args.publish(trainer, metrics, task="token-classification", dataset="ignored", split="validation", push=True)

    assert {"README.md", "model.safetensors", "tokenizer_config.json"} <= repo_files("elmo-org/tagger")
    card = ModelCard.load("elmo-org/tagger")
    assert (card.data.base_model, card.data.pipeline_tag) == ("elmo-org/bilm", "token-classification")
    [result] = card.data.eval_results
    assert (result.dataset_name, result.dataset_type, result.dataset_split) == (
        "CoNLL-2003",
        "eriktks/conll2003",
        "validation",
    )
    assert (result.metric_type, result.metric_value) == ("f1", 0.625)
    assert ModelCard.load(tmp_path / "run" / "README.md").data.eval_results == card.data.eval_results


def test_loopback_guard_blocks_other_addresses(tmp_path):
    with loopback_guard() as blocked, pytest.raises(NonLoopbackConnection):
        socket.create_connection(("192.0.2.1", 443), timeout=1)  # TEST-NET-1: never routed
    assert blocked == [("192.0.2.1", 443)]
    with loopback_guard() as blocked, pytest.raises(NonLoopbackConnection):
        socket.create_connection(("huggingface.co", 443), timeout=1)
    assert blocked == [("huggingface.co", 443)]
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            client_prelude(TESTS_DIR) + "import socket\n"
            "try:\n    socket.create_connection(('192.0.2.1', 443), timeout=1)\nexcept ConnectionError:\n    pass\n",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 97 and "192.0.2.1" in result.stderr  # even a swallowed attempt fails the child
