"""The bilm-tf training checkpoint converter: TF-free reader, name mapping, parity with bilm-tf's own outputs."""

import json

import h5py
import numpy as np
import pytest
import torch
from tf_checkpoint_writer import write_tf_checkpoint

from conversion.convert_elmo_original_tf_to_hf import main
from elmo_hf import ElmoForPreTraining, ElmoModel
from elmo_hf.convert.convert_bilm_tf import convert_hdf5, convert_tf_checkpoint
from elmo_hf.convert.tf_checkpoint_reader import read_tf_checkpoint


@pytest.fixture(scope="module")
def checkpoint_dir(fixtures_dir):
    return fixtures_dir / "tiny_char_bilm_ckpt"


@pytest.fixture(scope="module")
def converted(checkpoint_dir):
    model, tokenizer, report = convert_tf_checkpoint(
        checkpoint_dir / "model.ckpt-60", checkpoint_dir / "options.json", checkpoint_dir / "vocab.txt"
    )
    return model, tokenizer, report


def test_reader_lists_every_variable_with_its_shape(checkpoint_dir):
    arrays = read_tf_checkpoint(str(checkpoint_dir / "model.ckpt-60"))
    with open(checkpoint_dir / "checkpoint_variables.json") as listing:
        expected = {name: tuple(shape) for name, shape in json.load(listing)}
    assert {name: array.shape for name, array in arrays.items()} == expected
    assert float(arrays["global_step"]) == 60


def test_checkpoint_gives_the_same_weights_as_the_dumped_hdf5(converted, checkpoint_dir):
    model, _, report = converted
    assert isinstance(model, ElmoForPreTraining)
    assert report["variables_converted"] == 35 and report["variables_skipped"] == 37
    from_hdf5, _, _ = convert_hdf5(
        checkpoint_dir / "options_inference.json", checkpoint_dir / "weights_dumped_by_bilm_tf.hdf5"
    )
    expected = from_hdf5.state_dict()
    actual = model.elmo.state_dict()
    assert actual.keys() == expected.keys()
    for name in expected:
        assert torch.equal(actual[name], expected[name]), name
    softmax = read_tf_checkpoint(str(checkpoint_dir / "model.ckpt-60"))
    assert np.array_equal(model.lm_head.weight.detach().numpy(), softmax["lm/softmax/W"])
    assert np.array_equal(model.lm_head.bias.detach().numpy(), softmax["lm/softmax/b"])


def test_checkpoint_reproduces_bilm_tf_stateful_outputs(converted, checkpoint_dir):
    model, _, _ = converted
    states = None
    with h5py.File(checkpoint_dir / "expected_outputs_bilm_tf.hdf5", "r") as expected:
        for batch in range(3):
            char_ids = torch.from_numpy(expected[f"char_ids_b{batch}"][...]).long()  # (rows, len + 2, 50)
            rows = char_ids.shape[0]
            if states is not None:
                # bilm-tf carries each row's state into the same row of the next (smaller) batch.
                states = tuple(state[:, :, :rows] for state in states)
            with torch.no_grad():
                output = model.elmo(char_ids, lstm_states=states, output_hidden_states=True)
            states = output.lstm_states
            mask = expected[f"mask_b{batch}"][...].astype(bool)  # (rows, len): words, boundaries excluded
            assert np.array_equal(mask.sum(1), expected[f"lengths_b{batch}"][...])
            reference = expected[f"lm_embeddings_b{batch}"][...]  # (rows, 3, len, 2 * proj)
            width = mask.shape[1]
            ours = torch.stack(output.hidden_states, dim=1)[:, :, 1 : 1 + width].numpy()  # after <S>
            for row in range(rows):
                valid = mask[row]
                assert np.allclose(ours[row][:, valid], reference[row][:, valid], atol=1e-6), (batch, row)


def test_checkpoint_without_softmax_converts_to_elmo_model(checkpoint_dir, tmp_path, capsys):
    arrays_prefix = tmp_path / "model.ckpt-60"
    # The same checkpoint, its index rewritten without the softmax entries, is an inference-only dump.
    _write_checkpoint_without(checkpoint_dir / "model.ckpt-60", arrays_prefix, ("lm/softmax/W", "lm/softmax/b"))
    model, tokenizer, report = convert_tf_checkpoint(arrays_prefix, checkpoint_dir / "options.json")
    assert type(model) is ElmoModel and report["model_class"] == "ElmoModel"
    assert "has no softmax (lm/softmax/W): converting the biLM only, to ElmoModel" in capsys.readouterr().err


def test_unknown_checkpoint_variable_is_an_error(checkpoint_dir, tmp_path):
    prefix = tmp_path / "model.ckpt-60"
    _write_checkpoint_without(
        checkpoint_dir / "model.ckpt-60", prefix, (), extra={"lm/mystery": np.ones(3, np.float32)}
    )
    with pytest.raises(ValueError, match=r"variables not used by this converter: \['lm/mystery'\]"):
        convert_tf_checkpoint(prefix, checkpoint_dir / "options.json", checkpoint_dir / "vocab.txt")


def test_cli_writes_a_pretraining_checkpoint(checkpoint_dir, tmp_path):
    output = tmp_path / "converted"
    main(
        [
            "--tf-checkpoint",
            str(checkpoint_dir / "model.ckpt-60"),
            "--options",
            str(checkpoint_dir / "options.json"),
            "--vocab",
            str(checkpoint_dir / "vocab.txt"),
            "--output-dir",
            str(output),
        ]
    )
    reloaded = ElmoForPreTraining.from_pretrained(output)
    assert reloaded.config.vocab_size == 32 and reloaded.config.num_sampled_negatives == 16
    assert (output / "vocab.txt").read_text().splitlines()[:3] == ["<S>", "</S>", "<UNK>"]


def _write_checkpoint_without(source_prefix, target_prefix, dropped, extra=None):
    """Write a checkpoint with some variables dropped or added, in the TF bundle format (test helper)."""
    arrays = {name: array for name, array in read_tf_checkpoint(str(source_prefix)).items() if name not in dropped}
    arrays.update(extra or {})
    write_tf_checkpoint(str(target_prefix), arrays)


def test_single_layer_checkpoint_without_multi_rnn_cell_scope(converted, checkpoint_dir, tmp_path):
    # bilm-tf builds no MultiRNNCell for one layer: its names lack "multi_rnn_cell/cell_0/".
    arrays = read_tf_checkpoint(str(checkpoint_dir / "model.ckpt-60"))
    single = {
        name.replace("multi_rnn_cell/cell_0/", ""): array for name, array in arrays.items() if "/cell_1/" not in name
    }
    write_tf_checkpoint(str(tmp_path / "model.ckpt-1"), single)
    options = json.loads((checkpoint_dir / "options.json").read_text())
    options["lstm"]["n_layers"] = 1
    (tmp_path / "options.json").write_text(json.dumps(options))
    model, _, _ = convert_tf_checkpoint(
        tmp_path / "model.ckpt-1", tmp_path / "options.json", checkpoint_dir / "vocab.txt"
    )
    two_layers = converted[0]
    assert model.config.num_lstm_layers == 1
    assert torch.equal(model.elmo.encoder.layers[0].input_weight, two_layers.elmo.encoder.layers[0].input_weight)


def test_vocab_must_match_the_softmax(checkpoint_dir, tmp_path):
    with pytest.raises(ValueError, match="the checkpoint has a softmax over 32 words: give --vocab"):
        convert_tf_checkpoint(checkpoint_dir / "model.ckpt-60", checkpoint_dir / "options.json")
    short = tmp_path / "vocab.txt"
    short.write_text("<S>\n</S>\n<UNK>\nthe\n")
    with pytest.raises(ValueError, match="vocab.txt: has 4 words, but the checkpoint's softmax has 32"):
        convert_tf_checkpoint(checkpoint_dir / "model.ckpt-60", checkpoint_dir / "options.json", short)
