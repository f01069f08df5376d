"""elmo_hf.compat.allennlp against real allennlp 2.10.1 outputs, and `elmo-hf embed` with `allennlp elmo`'s flags.

The outputs in tests/data/allennlp/allennlp_elmo_reference.npz were written by tools/make_allennlp_reference.py (run
with allennlp 2.10.1 in the peer venv) on the allennlp test weights of the reference fixtures (allennlp_elmo/), which
the tests here load through the same options.json + hdf5 pair. Below them, the malformed-input battery.
"""

import json
import logging
import sys
from functools import partial
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from helpers import REPO_ROOT

from elmo_hf.cli import main
from elmo_hf.compat import allennlp as compat
from elmo_hf.compat.allennlp import Elmo, ElmoEmbedder, batch_to_ids
from elmo_hf.user_errors import UserInputError

REFERENCE = REPO_ROOT / "tests" / "data" / "allennlp" / "allennlp_elmo_reference.npz"
ATOL = 1e-5
# The cases of tools/make_allennlp_reference.py: name -> Elmo keyword arguments.
ELMO_CASES = {
    "one": {"num_output_representations": 1},
    "two": {"num_output_representations": 2},
    "requires_grad": {"num_output_representations": 1, "requires_grad": True},
    "layer_norm": {"num_output_representations": 1, "do_layer_norm": True},
    "dropout": {"num_output_representations": 1, "dropout": 0.3},
    "mix": {"num_output_representations": 2, "scalar_mix_parameters": [0.3, -0.5, 1.2]},
    "boundaries": {"num_output_representations": 1, "keep_sentence_boundaries": True},
    "boundaries_layer_norm": {"num_output_representations": 1, "keep_sentence_boundaries": True, "do_layer_norm": True},
    "no_boundaries": {"num_output_representations": 1, "keep_sentence_boundaries": False},
}
STREAM_ROWS = [4, 2, 3]


@pytest.fixture(scope="module")
def reference():
    with np.load(REFERENCE) as arrays:
        return {key: arrays[key] for key in arrays.files}


@pytest.fixture(scope="module")
def sentences(reference):
    return json.loads(str(reference["sentences"]))


@pytest.fixture(scope="module")
def pair(fixtures_dir, tmp_path_factory):
    """(options.json, lm_weights.hdf5) of the allennlp test weights, with the conversion cache in a fresh folder."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ELMO_HF_CACHE", str(tmp_path_factory.mktemp("elmo_hf_cache")))
        folder = fixtures_dir / "allennlp_elmo"
        yield str(folder / "options.json"), str(folder / "lm_weights.hdf5")


def assert_matches(output, reference, prefix):
    representations = output["elmo_representations"]
    expected = sorted(key for key in reference if key.startswith(f"{prefix}/representation_"))
    assert len(representations) == len(expected)
    for index, representation in enumerate(representations):
        ours, theirs = representation.detach().numpy(), reference[f"{prefix}/representation_{index}"]
        assert ours.shape == theirs.shape
        difference = np.abs(ours - theirs).max()
        assert np.allclose(ours, theirs, atol=ATOL), f"{prefix}, representation {index}: max difference {difference}"
    assert output["mask"].dtype == torch.bool
    assert np.array_equal(output["mask"].numpy(), reference[f"{prefix}/mask"])


def test_batch_to_ids_equals_allennlp(reference, sentences):
    assert np.array_equal(batch_to_ids(sentences[:4]).numpy(), reference["batch_to_ids"])


@pytest.mark.parametrize("case", sorted(ELMO_CASES))
def test_elmo_equals_allennlp(pair, reference, sentences, case):
    elmo = Elmo(*pair, **ELMO_CASES[case]).eval()
    assert_matches(elmo(batch_to_ids(sentences[:4])), reference, f"elmo/{case}")
    assert elmo.get_output_dim() == int(reference[f"elmo/{case}/output_dim"])


def test_requires_grad_trains_the_bilm_with_allennlps_gradients(pair, reference, sentences):
    frozen = Elmo(*pair, num_output_representations=1)
    assert not any(parameter.requires_grad for parameter in frozen.bilm.parameters())
    elmo = Elmo(*pair, num_output_representations=1, requires_grad=True).eval()
    assert all(parameter.requires_grad for parameter in elmo.bilm.parameters())
    (elmo(batch_to_ids(sentences[:4]))["elmo_representations"][0] ** 2).sum().backward()
    prefix = "elmo/requires_grad"
    assert np.allclose(elmo.scalar_mix_0.weights.grad.numpy(), reference[f"{prefix}/grad_scalar_parameters"], atol=1e-4)
    assert np.allclose(elmo.scalar_mix_0.gamma.grad.numpy(), reference[f"{prefix}/grad_gamma"], atol=1e-4)
    char_embedding_grad = elmo.bilm.character_encoder.char_embedding.grad.numpy()
    expected = reference[f"{prefix}/grad_char_embedding"]
    assert np.abs(expected).max() > 0
    assert np.allclose(char_embedding_grad, expected, rtol=1e-4, atol=1e-4)


def test_dropout_applies_in_training_mode_only(pair, reference, sentences):
    elmo = Elmo(*pair, num_output_representations=1, dropout=0.3).train()
    torch.manual_seed(0)
    dropped = elmo(batch_to_ids(sentences[:4]))["elmo_representations"][0].detach().numpy()
    expected = reference["elmo/dropout/representation_0"]
    kept = dropped != 0
    assert 0.5 < kept[expected != 0].mean() < 0.9
    assert np.allclose(dropped[kept], expected[kept] / 0.7, atol=ATOL)


def test_four_dimensional_input_keeps_its_shape(pair, reference, sentences):
    char_ids = batch_to_ids(sentences[:4])
    output = Elmo(*pair, num_output_representations=1).eval()(char_ids.view(2, 2, *char_ids.shape[1:]))
    assert output["elmo_representations"][0].shape == (2, 2, char_ids.shape[1], 32)
    assert_matches(output, reference, "elmo/four_dims")


def test_vocab_to_cache_with_word_inputs(pair, reference, sentences):
    vocabulary = json.loads(str(reference["vocabulary"]))
    elmo = Elmo(*pair, num_output_representations=1, vocab_to_cache=vocabulary).eval()
    word_ids = torch.from_numpy(reference["word_ids"])
    char_ids = batch_to_ids(sentences[:4])
    assert_matches(elmo(char_ids, word_ids), reference, "elmo/vocab_word_inputs")
    # allennlp reads the words from word_inputs alone: other characters change nothing.
    assert_matches(elmo(torch.zeros_like(char_ids), word_ids), reference, "elmo/vocab_word_inputs")
    assert_matches(elmo(char_ids), reference, "elmo/vocab_characters")


def test_word_inputs_without_a_cached_vocabulary_are_ignored_with_a_warning(pair, reference, sentences, caplog):
    elmo = Elmo(*pair, num_output_representations=1).eval()
    with caplog.at_level(logging.WARNING, logger="elmo_hf.compat.allennlp"):
        output = elmo(batch_to_ids(sentences[:4]), torch.from_numpy(reference["word_ids"]))
    assert "does not have a cached vocab" in caplog.text
    assert_matches(output, reference, "elmo/one")


def stream(elmo, sentences):
    outputs, used = [], 0
    for rows in STREAM_ROWS:
        outputs.append(elmo(batch_to_ids(sentences[used : used + rows])))
        used += rows
    return outputs


def test_stateful_stream_of_4_2_3_rows_equals_allennlp(pair, reference, sentences):
    elmo = Elmo(*pair, num_output_representations=1, stateful=True).eval()
    for step, output in enumerate(stream(elmo, sentences)):
        assert_matches(output, reference, f"elmo/stateful_{step}")
    elmo.reset_states()
    assert_matches(elmo(batch_to_ids(sentences[:4])), reference, "elmo/after_reset")


def test_stateless_default_does_not_depend_on_earlier_batches(pair, reference, sentences):
    elmo = Elmo(*pair, num_output_representations=1).eval()
    assert elmo.stateful is False
    outputs = stream(elmo, sentences)
    alone = Elmo(*pair, num_output_representations=1).eval()(batch_to_ids(sentences[4:6]))
    ours = outputs[1]["elmo_representations"][0].detach().numpy()
    assert np.allclose(ours, alone["elmo_representations"][0].detach().numpy(), atol=1e-6)
    # ... where allennlp's carried state moves the same sentences by far more than the tolerance.
    assert np.abs(ours - reference["elmo/stateful_1/representation_0"]).max() > 100 * ATOL


@pytest.mark.parametrize("stateful", [False, True])
def test_elmo_embedder_equals_allennlp_09(pair, reference, sentences, stateful):
    embedder = ElmoEmbedder(*pair, stateful=stateful)
    name = "embedder_stateful" if stateful else "embedder_stateless"
    arrays = list(embedder.embed_sentences(iter(sentences), batch_size=3))
    assert len(arrays) == len(sentences)
    for index, (array, sentence) in enumerate(zip(arrays, sentences)):
        assert array.shape == (3, len(sentence), 32) and array.dtype == np.float32
        assert np.allclose(array, reference[f"{name}/{index}"], atol=ATOL), f"sentence {index}"
    if stateful:
        assert np.abs(arrays[5] - reference[f"embedder_stateless/{5}"]).max() > 100 * ATOL


def test_elmo_embedder_sentence_batch_and_tensors(pair, reference, sentences):
    embedder = ElmoEmbedder(*pair)
    assert np.allclose(embedder.embed_sentence(sentences[0]), reference["embedder_stateless/0"], atol=ATOL)
    arrays = embedder.embed_batch([sentences[0], [], sentences[2]])
    assert [array.shape for array in arrays] == [(3, 7, 32), (3, 0, 32), (3, 2, 32)]
    assert np.allclose(arrays[2], reference["embedder_stateless/2"], atol=ATOL)
    assert embedder.embed_batch([[]])[0].shape == (3, 0, 32)
    activations, mask = embedder.batch_to_embeddings(sentences[:3])
    assert activations.shape == (3, 3, 7, 32) and mask.dtype == torch.long
    assert mask.sum(dim=1).tolist() == [7, 7, 2]
    assert np.allclose(activations[2, :, :2].numpy(), reference["embedder_stateless/2"], atol=ATOL)
    assert torch.all(activations[2, :, 2:] == 0)


def read_hdf5(path):
    with h5py.File(path, "r") as file:
        return {key: file[key][()] for key in file.keys()}


@pytest.fixture
def text_file(tmp_path, sentences):
    path = tmp_path / "sentences.txt"
    path.write_text("".join(" ".join(sentence) + "\n" for sentence in sentences), encoding="utf-8")
    return path


@pytest.mark.parametrize("output_format", ["all", "top", "average"])
def test_embed_file_writes_allennlp_09_layout(pair, reference, sentences, text_file, tmp_path, output_format):
    output = tmp_path / "out.hdf5"
    with open(text_file, encoding="utf-8") as input_file:
        ElmoEmbedder(*pair).embed_file(input_file, output, output_format=output_format, batch_size=3)
        assert input_file.closed  # as 0.9 did
    written = read_hdf5(output)
    assert sorted(written) == sorted([str(index) for index in range(len(sentences))] + ["sentence_to_index"])
    assert json.loads(written["sentence_to_index"][0]) == {
        " ".join(sentence): str(index) for index, sentence in enumerate(sentences)
    }
    for index in range(len(sentences)):
        expected = reference[f"embedder_stateless/{index}"]
        expected = {"all": expected, "top": expected[-1], "average": expected.mean(axis=0)}[output_format]
        assert written[str(index)].dtype == np.float32 and written[str(index)].shape == expected.shape
        assert np.allclose(written[str(index)], expected, atol=ATOL)


@pytest.mark.parametrize("stateful", [False, True])
def test_embed_file_sentence_keys_and_forgotten_sentences(pair, reference, sentences, text_file, tmp_path, stateful):
    embedder = ElmoEmbedder(*pair, stateful=stateful)
    embedder.embed_file(str(text_file), tmp_path / "keys.hdf5", batch_size=3, use_sentence_keys=True)
    written = read_hdf5(tmp_path / "keys.hdf5")
    assert sorted(written) == sorted(" ".join(sentence) for sentence in sentences)
    name = "embedder_stateful" if stateful else "embedder_stateless"
    for index, sentence in enumerate(sentences):
        assert np.allclose(written[" ".join(sentence)], reference[f"{name}/{index}"], atol=ATOL)
    embedder.reset_states()
    embedder.embed_file(str(text_file), tmp_path / "forget.hdf5", "top", batch_size=3, forget_sentences=True)
    assert sorted(read_hdf5(tmp_path / "forget.hdf5")) == sorted(str(index) for index in range(len(sentences)))


def test_sentence_keys_refuse_repeated_lines(pair, tmp_path):
    path = tmp_path / "repeated.txt"
    path.write_text("a b\nc\na b\n", encoding="utf-8")
    with pytest.raises(UserInputError, match="the line 'a b' appears twice"):
        ElmoEmbedder(*pair).embed_file(str(path), tmp_path / "out.hdf5", use_sentence_keys=True)
    assert not (tmp_path / "out.hdf5").exists()


def test_converted_once_then_cached_and_a_converted_folder_is_accepted(pair, monkeypatch, tmp_path, sentences):
    Elmo(*pair, num_output_representations=1)  # converted (or already cached) here

    def fail(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(compat, "_convert_into", fail)
    cached = Elmo(*pair, num_output_representations=1).eval()
    model_folder = tmp_path / "converted"
    cached.bilm.save_pretrained(model_folder)
    from_folder = Elmo(str(model_folder), None, num_output_representations=1).eval()
    char_ids = batch_to_ids(sentences[:4])
    assert torch.allclose(
        cached(char_ids)["elmo_representations"][0], from_folder(char_ids)["elmo_representations"][0], atol=1e-6
    )


def test_a_changed_weight_file_is_converted_and_checked_again(pair, tmp_path):
    options, weights = pair
    edited = tmp_path / "options.json"
    settings = json.loads(open(options, encoding="utf-8").read())
    settings["lstm"]["projection_dim"] = 8
    edited.write_text(json.dumps(settings), encoding="utf-8")
    with pytest.raises(
        UserInputError, match=r"lm_weights\.hdf5: dataset 'CNN_proj/W_proj' has shape \(124, 16\), expected \(124, 8\)"
    ):
        Elmo(str(edited), weights, num_output_representations=1)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            {"options_file": None, "weight_file": None, "module": torch.nn.Linear(2, 2)},
            r"^module: needs a positive int attribute num_layers .* got Linear\(in_features=2",
        ),
        ({"module": torch.nn.Linear(2, 2)}, "^module: pass options_file=None and weight_file=None with a module"),
        ({"num_output_representations": 0}, "^num_output_representations: must be a positive int, got 0"),
        ({"scalar_mix_parameters": [1.0, 2.0]}, r"^scalar_mix_parameters: needs 3 values .* got 2"),
        ({"requires_grad": True, "vocab_to_cache": ["a"]}, "^vocab_to_cache: cannot be combined with requires_grad"),
        ({"dropout": 1.5}, r"^dropout: must be a probability in \[0, 1\), got 1.5"),
        ({"stateful": "yes"}, "^stateful: must be True or False, got 'yes'"),
        ({"weight_file": "missing.hdf5"}, "^weight_file: missing.hdf5: no such file"),
        ({"weight_file": None}, "^weight_file: required with the options file"),
        ({"options_file": "./no-such-folder", "weight_file": None}, "^options_file: ./no-such-folder: no such folder"),
    ],
)
def test_arguments_that_cannot_be_honoured_are_one_line_errors(pair, arguments, message):
    arguments = {"options_file": pair[0], "weight_file": pair[1], "num_output_representations": 1, **arguments}
    with pytest.raises(UserInputError, match=message) as error:
        Elmo(**arguments)
    assert "\n" not in str(error.value)


def test_embedder_argument_errors(pair, tmp_path, text_file):
    count = torch.cuda.device_count()
    with pytest.raises(UserInputError, match=rf"^cuda_device: {count} is not available \({count} CUDA devices\)"):
        ElmoEmbedder(*pair, cuda_device=count)
    with pytest.raises(UserInputError, match="^output_format: must be one of all, top, average, got 'mix'"):
        ElmoEmbedder(*pair).embed_file(str(text_file), tmp_path / "out.hdf5", output_format="mix")


# ---- `elmo-hf embed` with `allennlp elmo`'s flags ----


def test_allennlp_elmo_command_line_works_with_only_the_program_name_changed(tmp_path, text_file, sentences):
    # allennlp elmo sentences.txt elmo_layers.hdf5 --all   ->   elmo-hf embed sentences.txt elmo_layers.hdf5 --all
    main(["embed", str(text_file), str(tmp_path / "elmo_layers.hdf5"), "--all", "--quiet"])
    written = read_hdf5(tmp_path / "elmo_layers.hdf5")
    assert json.loads(written["sentence_to_index"][0])[" ".join(sentences[3])] == "3"
    assert written["3"].ndim == 3 and written["3"].shape[:2] == (3, len(sentences[3]))


@pytest.mark.parametrize(
    "flags, keywords",
    [
        (["--all"], {"output_format": "all"}),
        (["--top", "--forget-sentences"], {"output_format": "top", "forget_sentences": True}),
        (["--average", "--use-sentence-keys"], {"output_format": "average", "use_sentence_keys": True}),
    ],
)
def test_command_writes_the_file_of_the_compat_embed_file(pair, tmp_path, text_file, flags, keywords):
    options, weights = pair
    command_output = tmp_path / "command_output"  # no suffix: hdf5 all the same, as allennlp
    arguments = ["embed", str(text_file), str(command_output), *flags, "--batch-size", "3", "--cuda-device", "-1"]
    main([*arguments, "--options-file", options, "--weight-file", weights, "--quiet"])
    ElmoEmbedder(options, weights).embed_file(str(text_file), tmp_path / "api.hdf5", batch_size=3, **keywords)
    from_command, from_api = read_hdf5(command_output), read_hdf5(tmp_path / "api.hdf5")
    assert sorted(from_command) == sorted(from_api)
    for key, array in from_api.items():
        assert np.array_equal(from_command[key], array), key
    assert not list(tmp_path.glob("*.incomplete*"))


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--cuda-device", "7", "--device", "cpu"], "--cuda-device: give either --cuda-device or --device"),
        (["--options-file", "options.json"], "--options-file: goes with --weight-file"),
        (["--use-sentence-keys", "--quiet"], "--use-sentence-keys: allennlp's layout is hdf5"),
    ],
)
def test_command_flag_errors_are_one_line(tmp_path, text_file, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_status:
        main(["embed", str(text_file), str(tmp_path / "out.npz"), *flags])
    assert exit_status.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"error: {message}")


def test_urls_are_downloaded_and_no_files_mean_the_published_original(
    pair, reference, sentences, monkeypatch, loopback_only
):
    from hub_server import FileServer

    from elmo_hf.convert.published import BASE_URL_VARIABLE, default_download_dir, published_model

    options, weights = (open(path, "rb").read() for path in pair)
    original = published_model("original")
    files = {
        f"/elmo/{original.options_path}": options,
        f"/elmo/{original.weights_path}": weights,
        "/elmo/mine/options.json": options,
        "/elmo/mine/weights.hdf5": weights,
    }
    with FileServer(files) as server:
        monkeypatch.setenv(BASE_URL_VARIABLE, server.url)
        default = ElmoEmbedder()  # allennlp 0.9's default: the published "original" model
        elmo = Elmo(f"{server.url}/mine/options.json", f"{server.url}/mine/weights.hdf5", 1).eval()
        Elmo(f"{server.url}/mine/options.json", f"{server.url}/mine/weights.hdf5", 1)  # downloaded only once
    assert sorted(path for path, _, _ in server.requests) == sorted(files)
    # Kept where `elmo-hf convert --published original` keeps it.
    assert (Path(default_download_dir()) / "original" / original.weights_path.rsplit("/", 1)[-1]).is_file()
    assert np.allclose(default.embed_sentence(sentences[0]), reference["embedder_stateless/0"], atol=ATOL)
    assert_matches(elmo(batch_to_ids(sentences[:4])), reference, "elmo/one")


def test_fixed_scalar_mix_parameters_are_not_trained(pair):
    fixed = Elmo(*pair, num_output_representations=2, scalar_mix_parameters=[0.3, -0.5, 1.2])
    learned = Elmo(*pair, num_output_representations=2)
    assert [name for name, parameter in fixed.named_parameters() if parameter.requires_grad] == []
    assert sorted(name for name, parameter in learned.named_parameters() if parameter.requires_grad) == [
        "scalar_mix_0.gamma",
        "scalar_mix_0.weights",
        "scalar_mix_1.gamma",
        "scalar_mix_1.weights",
    ]


# ---- malformed input: one line naming the value, before any torch code ----

TORCH_ERRORS = (RuntimeError, IndexError, AttributeError, TypeError, KeyError)


def assert_one_line_error(call, *named):
    """`call()` raises UserInputError with one line that holds every string of `named`, and nothing else was raised
    on the way (no torch error behind it)."""
    with pytest.raises(UserInputError) as error:
        call()
    message = str(error.value)
    assert "\n" not in message, message
    for text in named:
        assert text in message, f"{text!r} not in {message!r}"
    assert not isinstance(error.value.__context__, TORCH_ERRORS), repr(error.value.__context__)


@pytest.fixture(scope="module")
def modules(pair):
    """The drop-in's modules that take character ids, each as a function of them."""
    elmo = Elmo(*pair, num_output_representations=1).eval()
    bilm = compat._ElmoBiLm(*pair).eval()
    encoder = compat._ElmoCharacterEncoder(*pair).eval()
    token_embedder = compat.ElmoTokenEmbedder(*pair).eval()
    return {"Elmo": elmo, "_ElmoBiLm": bilm, "_ElmoCharacterEncoder": encoder, "ElmoTokenEmbedder": token_embedder}


def padded_in_the_middle():
    ids = batch_to_ids([["a", "b", "c"]])
    ids[0, 1] = 0
    return ids


def out_of_range(value):
    ids = batch_to_ids([["a", "b"]])
    ids[0, 1, 3] = value
    return ids


# (name, inputs, strings the error names)
BAD_CHARACTER_IDS = [
    ("rank 2", lambda: batch_to_ids([["a", "b"]])[0], ["inputs", "(2, 50)"]),
    ("rank 1", lambda: batch_to_ids([["a"]])[0, 0], ["inputs", "(50,)"]),
    ("float", lambda: batch_to_ids([["a", "b"]]).float(), ["inputs", "torch.float32"]),
    ("bool", lambda: batch_to_ids([["a", "b"]]) > 0, ["inputs", "torch.bool"]),
    ("a list", lambda: batch_to_ids([["a"]]).tolist(), ["inputs", "[[[", "(list)"]),
    ("49 characters", lambda: batch_to_ids([["a", "b"]])[..., :49], ["inputs", "must be 50", "(1, 2, 49)"]),
    ("51 characters", lambda: torch.nn.functional.pad(batch_to_ids([["a"]]), (0, 1)), ["must be 50", "(1, 1, 51)"]),
    ("id 262", lambda: out_of_range(262), ["inputs", "0..261", "got 262 at index (0, 1, 3)"]),
    ("id -1", lambda: out_of_range(-1), ["inputs", "0..261", "got -1 at index (0, 1, 3)"]),
    ("no sentence", lambda: batch_to_ids([]), ["inputs", "at least one sentence", "(0, 0, 50)"]),
    ("padding first", padded_in_the_middle, ["inputs", "word (0, 2) comes after a padding word"]),
]


@pytest.mark.parametrize("module_name", ["Elmo", "_ElmoBiLm", "_ElmoCharacterEncoder", "ElmoTokenEmbedder"])
@pytest.mark.parametrize("case, inputs, named", BAD_CHARACTER_IDS, ids=[case[0] for case in BAD_CHARACTER_IDS])
def test_malformed_character_ids_are_one_line_errors(modules, module_name, case, inputs, named):
    module = modules[module_name]
    if module_name in ("_ElmoBiLm", "_ElmoCharacterEncoder") and case.startswith("rank"):
        named = [*named, "(batch, words, 50)"]
    assert_one_line_error(lambda: module(inputs()), *named)


def test_more_leading_dimensions_are_for_elmo_only(modules):
    ids = batch_to_ids([["a", "b"]]).unsqueeze(0)  # (1, 1, 2, 50)
    assert modules["Elmo"](ids)["elmo_representations"][0].shape == (1, 1, 2, 32)
    for module in (modules["_ElmoBiLm"], modules["_ElmoCharacterEncoder"]):
        assert_one_line_error(partial(module, ids), "inputs", "(batch, words, 50)", "(1, 1, 2, 50)")


def test_malformed_word_inputs_are_one_line_errors(pair):
    elmo = Elmo(*pair, num_output_representations=1, vocab_to_cache=["a", "b"]).eval()
    ids = batch_to_ids([["a", "b"]])
    assert_one_line_error(lambda: elmo(ids, torch.tensor([[1.0, 2.0]])), "word_inputs", "torch.float32")
    assert_one_line_error(lambda: elmo(ids, torch.tensor([1, 2])), "word_inputs", "(1, 2)", "got (2,)")
    assert_one_line_error(lambda: elmo(ids, [[1, 2]]), "word_inputs", "[[1, 2]] (list)")
    assert_one_line_error(
        lambda: Elmo(*pair, num_output_representations=1, vocab_to_cache=["a", None]), "vocab_to_cache[1]", "None"
    )


# (name, the call on an ElmoEmbedder, strings the error names)
BAD_WORDS = [
    ("batch_to_ids: a string", lambda embedder: batch_to_ids("The cat"), ["batch:", "'The cat' (str)"]),
    ("batch_to_ids: strings", lambda embedder: batch_to_ids(["The cat"]), ["batch[0]:", "the string 'The cat'"]),
    ("batch_to_ids: None", lambda embedder: batch_to_ids(None), ["batch:", "None (NoneType)"]),
    ("batch_to_ids: None word", lambda embedder: batch_to_ids([["a", None]]), ["batch[0][1]:", "None (NoneType)"]),
    ("batch_to_ids: int word", lambda embedder: batch_to_ids([["a"], [3]]), ["batch[1][0]:", "3 (int)"]),
    ("batch_to_ids: bytes", lambda embedder: batch_to_ids([[b"a"]]), ["batch[0][0]:", "b'a' (bytes)"]),
    ("embed_sentence: a string", lambda embedder: embedder.embed_sentence("The cat"), ["sentence:", "'The cat'"]),
    ("embed_sentence: None word", lambda embedder: embedder.embed_sentence(["a", None]), ["sentence[1]:", "None"]),
    ("embed_batch: a string", lambda embedder: embedder.embed_batch("The cat"), ["batch:", "'The cat' (str)"]),
    ("embed_batch: strings", lambda embedder: embedder.embed_batch(["The", "cat"]), ["batch[0]:", "string 'The'"]),
    ("embed_batch: int word", lambda embedder: embedder.embed_batch([["a", 1]]), ["batch[0][1]:", "1 (int)"]),
    ("embed_sentences: a string", lambda embedder: list(embedder.embed_sentences("a b")), ["sentences:", "'a b'"]),
    ("embed_sentences: strings", lambda e: list(e.embed_sentences(["a b"])), ["sentences[0]:", "the string 'a b'"]),
    ("embed_sentences: None", lambda e: list(e.embed_sentences([["a"], None])), ["sentences[1]:", "None (NoneType)"]),
    ("batch_to_embeddings: a string", lambda e: e.batch_to_embeddings("a b"), ["batch:", "'a b' (str)"]),
    ("batch_to_embeddings: []", lambda e: e.batch_to_embeddings([]), ["batch:", "at least one", "empty list"]),
]


@pytest.mark.parametrize("case, call, named", BAD_WORDS, ids=[case[0] for case in BAD_WORDS])
def test_malformed_words_are_one_line_errors(pair, case, call, named):
    embedder = ElmoEmbedder(*pair)
    assert_one_line_error(lambda: call(embedder), *named)


BLANK_WORDS = [["The", "", "cat"], [" ", "sat"], ["no", "blanks", "here"]]  # as tools/make_allennlp_reference.py


def assert_layers_match(output, reference, prefix):
    assert np.array_equal(output["mask"].numpy(), reference[f"{prefix}/mask"])
    assert len(output["activations"]) == 3
    for index, activation in enumerate(output["activations"]):
        expected = reference[f"{prefix}/activation_{index}"]
        assert activation.shape == expected.shape
        assert np.allclose(activation.detach().numpy(), expected, atol=ATOL), f"{prefix}, layer {index}"


def test_elmo_bilm_every_layer_equals_allennlp_over_a_stateful_stream(pair, reference, sentences):
    bilm = compat._ElmoBiLm(*pair, stateful=True)
    assert (bilm.num_layers, bilm.get_output_dim(), bilm.stateful) == (3, 32, True)
    used = 0
    for step, rows in enumerate(STREAM_ROWS):
        with torch.no_grad():
            assert_layers_match(bilm(batch_to_ids(sentences[used : used + rows])), reference, f"bilm/stateful_{step}")
        used += rows


def test_character_encoder_equals_allennlp_padding_included(pair, reference, sentences):
    encoder = compat._ElmoCharacterEncoder(*pair)
    assert encoder.get_output_dim() == 16
    with torch.no_grad():
        output = encoder(batch_to_ids(sentences[:4]))
    assert np.array_equal(output["mask"].numpy(), reference["char_encoder/mask"])
    assert np.allclose(output["token_embedding"].numpy(), reference["char_encoder/token_embedding"], atol=ATOL)


def test_elmo_over_a_given_module_and_the_token_embedder_equal_allennlp(pair, reference, sentences):
    elmo = Elmo(None, None, 2, dropout=0.0, module=compat._ElmoBiLm(*pair)).eval()
    assert elmo.get_output_dim() == 32 and elmo.bilm is elmo._elmo_lstm.model
    char_ids = batch_to_ids(sentences[:4])
    assert_matches(elmo(char_ids), reference, "elmo/module")
    embedder = compat.ElmoTokenEmbedder(*pair, dropout=0.0).eval()
    assert np.allclose(embedder(char_ids).detach().numpy(), reference["token_embedder"], atol=ATOL)
    projected = compat.ElmoTokenEmbedder(*pair, projection_dim=5)
    assert projected.get_output_dim() == 5 and projected(char_ids).shape == (4, char_ids.shape[1], 5)


@pytest.mark.parametrize("stateful", [False, True])
def test_empty_and_blank_words_are_words_in_elmo_and_elmo_embedder_alike(pair, reference, stateful):
    """As allennlp: any string is a word, "" included (its characters: begin and end of word only)."""
    with torch.no_grad():
        assert_layers_match(compat._ElmoBiLm(*pair)(batch_to_ids(BLANK_WORDS)), reference, "bilm/blank_words")
    lengths = reference["bilm/blank_words/mask"].sum(axis=1) - 2
    embedder = ElmoEmbedder(*pair, stateful=stateful)
    arrays = embedder.embed_batch(BLANK_WORDS)
    assert [array.shape for array in arrays] == [(3, 3, 32), (3, 2, 32), (3, 3, 32)]
    for row, array in enumerate(arrays):
        layers = [reference[f"bilm/blank_words/activation_{index}"][row, 1 : 1 + lengths[row]] for index in range(3)]
        assert np.allclose(array, np.stack(layers), atol=ATOL), f"sentence {row}"
    embedder.reset_states()
    assert np.allclose(embedder.embed_sentence(BLANK_WORDS[0]), arrays[0], atol=1e-6)
    elmo = Elmo(*pair, num_output_representations=1, dropout=0.0).eval()
    assert elmo(batch_to_ids(BLANK_WORDS))["mask"].sum(dim=1).tolist() == [3, 2, 3]


def test_without_h5py_the_hdf5_pair_names_the_extra_and_a_cached_pair_needs_nothing(pair, monkeypatch, tmp_path):
    Elmo(*pair, num_output_representations=1)  # converted and cached (with h5py)
    monkeypatch.setitem(sys.modules, "h5py", None)  # `import h5py` now fails
    Elmo(*pair, num_output_representations=1)  # the cached checkpoint loads without it
    monkeypatch.setenv("ELMO_HF_CACHE", str(tmp_path / "empty_cache"))
    with pytest.raises(ImportError, match=r"^weight_file: .* needs h5py: pip install 'elmo-hf\[conversion\]'"):
        Elmo(*pair, num_output_representations=1)
