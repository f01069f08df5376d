"""Parity with the original TensorFlow ELMo on every fixture set: numpy.allclose(atol=1e-6)."""

import json

import h5py
import numpy as np
import pytest
import torch
from helpers import WEIGHT_SETS, assert_close, stateful_batches

from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.convert.convert_bilm_tf import convert_hdf5


@pytest.fixture(scope="module", params=["converted", "round_trip"])
def converted(request, fixtures_dir, tmp_path_factory):
    """{weight set: (model, tokenizer)}, straight from the converter or after save/from_pretrained."""
    models = {}
    for name, (folder, _) in WEIGHT_SETS.items():
        model, tokenizer, _ = convert_hdf5(
            fixtures_dir / folder / "options.json", fixtures_dir / folder / "lm_weights.hdf5"
        )
        if request.param == "round_trip":
            directory = tmp_path_factory.mktemp(name)
            model.save_pretrained(directory)
            tokenizer.save_pretrained(directory)
            model, tokenizer = ElmoModel.from_pretrained(directory).eval(), ElmoTokenizer.from_pretrained(directory)
        models[name] = (model, tokenizer)
    return models


@pytest.mark.parametrize("name", WEIGHT_SETS)
def test_all_layers_and_token_embeddings_match_bilm_tf(name, converted, fixtures_dir):
    model, tokenizer = converted[name]
    expected = h5py.File(fixtures_dir / "bilm_tf_all_layers" / WEIGHT_SETS[name][1], "r")
    for index, batch, output in stateful_batches(fixtures_dir, model, tokenizer):
        char_ids = expected[f"char_ids_b{index}"][...]
        words = batch["input_ids"].shape[1]
        assert np.array_equal(batch["input_ids"].numpy(), char_ids[:, :words]), f"char ids of batch {index}"
        assert not char_ids[:, words:].any()
        layers = torch.stack(output.hidden_states, dim=1).numpy()  # (batch, layers, words, 2 * proj)
        for row in range(3):
            all_layers = expected[f"b{index}_k{row}"][...]  # (layers, words without boundaries, 2 * proj)
            assert_close(layers[row, :, 1 : all_layers.shape[1] + 1], all_layers, f"{name} b{index}_k{row}")
            tokens = expected[f"token_embeddings_b{index}_k{row}"][...]  # (words with boundaries, proj)
            ours = output.hidden_states[0][row, : tokens.shape[0], : tokens.shape[1]].numpy()
            assert_close(ours, tokens, f"{name} token_embeddings_b{index}_k{row}")


@pytest.mark.parametrize("name", WEIGHT_SETS)
def test_top_layer_matches_published_lm_embeddings(name, converted, fixtures_dir):
    model, tokenizer = converted[name]
    projection_dim = model.config.projection_dim
    files = [h5py.File(fixtures_dir / WEIGHT_SETS[name][0] / f"lm_embeddings_{row}.hdf5", "r") for row in range(3)]
    for index, _batch, output in stateful_batches(fixtures_dir, model, tokenizer):
        for row in range(3):
            expected = files[row][str(index)][...]  # (2 directions, words without boundaries, proj)
            top = output.last_hidden_state[row, 1 : expected.shape[1] + 1].numpy()
            ours = np.stack([top[:, :projection_dim], top[:, projection_dim:]])
            assert_close(ours, expected, f"{name} lm_embeddings_{row}[{index}]")


@pytest.mark.parametrize("name", WEIGHT_SETS)
def test_token_embeddings_of_the_vocabulary(name, converted, fixtures_dir):
    model, tokenizer = converted[name]
    folder = fixtures_dir / WEIGHT_SETS[name][0]
    vocabulary = (folder / "vocab_test.txt").read_text(encoding="utf-8").splitlines()
    expected = h5py.File(folder / "elmo_token_embeddings.hdf5", "r")["embedding"][...]
    assert len(vocabulary) == expected.shape[0]
    # One word per row, as bilm-tf's dump_token_embeddings ran them; '<S>'/'</S>' get the boundary ids.
    batch = tokenizer(
        [[word] for word in vocabulary], is_split_into_words=True, add_special_tokens=False, return_tensors="pt"
    )
    with torch.no_grad():
        ours = model(**batch, output_hidden_states=True).hidden_states[0][:, 0, : expected.shape[1]].numpy()
    assert_close(ours, expected, f"{name} elmo_token_embeddings")


def test_tiny_checkpoint_dump_matches_bilm_tf_outputs(fixtures_dir):
    """bilm-tf's own weight dump of a checkpoint it trained, run on 3 stateful batches of 3, 2 and 2 rows."""
    folder = fixtures_dir / "tiny_char_bilm_ckpt"
    model, _, _ = convert_hdf5(folder / "options_inference.json", folder / "weights_dumped_by_bilm_tf.hdf5")
    expected = h5py.File(folder / "expected_outputs_bilm_tf.hdf5", "r")
    states = None
    for index in range(3):
        char_ids = torch.from_numpy(expected[f"char_ids_b{index}"][...]).long()
        rows = char_ids.shape[0]
        # Batches of 3, 2 and 2 rows: the state from 3 rows is passed as it is, as bilm-tf keeps one state per row
        # slot (a smaller batch continues the first rows, the third row's state is carried through).
        with torch.no_grad():
            output = model(input_ids=char_ids, output_hidden_states=True, lstm_states=states)
        states = output.lstm_states
        assert output.hidden_states[0].shape[1] - 2 == expected[f"lengths_b{index}"][...].max()
        mask = expected[f"mask_b{index}"][...]  # (rows, words without boundaries)
        layers = torch.stack(output.hidden_states, dim=1)[:, :, 1 : mask.shape[1] + 1].numpy()
        reference = expected[f"lm_embeddings_b{index}"][...]  # (rows, layers, words, 2 * proj)
        for row in range(rows):
            valid = mask[row]
            assert_close(layers[row][:, valid], reference[row][:, valid], f"tiny lm_embeddings_b{index} row {row}")
        tokens = expected[f"token_embeddings_b{index}"][...]  # (rows, words with boundaries, proj)
        token_mask = (char_ids > 0).any(-1).numpy()
        ours = output.hidden_states[0][..., : tokens.shape[-1]].numpy()
        assert_close(ours[token_mask], tokens[token_mask], f"tiny token_embeddings_b{index}")


def test_stateless_mode_matches_bilm_tf_on_the_first_batch_only(fixtures_dir, converted):
    """Without lstm_states each call starts from zeros: it equals bilm-tf on batch 0 and differs after."""
    model, tokenizer = converted["allennlp_elmo"]
    expected = h5py.File(fixtures_dir / "bilm_tf_all_layers" / WEIGHT_SETS["allennlp_elmo"][1], "r")
    sentences = json.loads((fixtures_dir / "allennlp_elmo" / "sentences.json").read_text())
    for index, should_match in [(0, True), (1, False)]:
        batch = tokenizer(
            [sentences[row][index].split() for row in range(3)],
            is_split_into_words=True,
            padding=True,
            return_tensors="pt",
        )
        with torch.no_grad():
            layers = model(**batch, output_hidden_states=True).hidden_states
        reference = expected[f"b{index}_k0"][...]
        ours = torch.stack(layers)[:, 0, 1 : reference.shape[1] + 1].numpy()
        assert np.allclose(ours, reference, atol=1e-6) == should_match
