import numpy as np
import pytest
import torch
from helpers import tiny_config, tiny_model
from transformers import AutoConfig, AutoModel, AutoTokenizer

from elmo_hf import ElmoConfig, ElmoModel, ElmoModelOutput

SENTENCES = [["A", "short", "one"], ["Hi"], ["a", "much", "longer", "sentence", "with", "more", "words", "."]]


def encode(tokenizer, sentences, **kwargs):
    return tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt", **kwargs)


def test_output_shapes_and_layer_zero(tokenizer):
    model = tiny_model()
    batch = encode(tokenizer, SENTENCES)
    output = model(**batch, output_hidden_states=True)
    assert isinstance(output, ElmoModelOutput)
    assert output.last_hidden_state.shape == (3, 10, 16)
    assert len(output.hidden_states) == 3 and all(layer.shape == (3, 10, 16) for layer in output.hidden_states)
    assert torch.equal(output.hidden_states[-1], output.last_hidden_state)
    x = output.hidden_states[0]
    assert torch.equal(x[..., :8], x[..., 8:])  # layer 0 is [x; x]
    cell, hidden = output.lstm_states
    assert cell.shape == (2, 2, 3, 16) and hidden.shape == (2, 2, 3, 8)
    assert model(**batch).hidden_states is None
    assert isinstance(model(**batch, return_dict=False), tuple)


def test_padded_positions_are_zero(tokenizer):
    model = tiny_model()
    batch = encode(tokenizer, SENTENCES)
    layers = model(**batch, output_hidden_states=True).hidden_states
    padding = batch["attention_mask"] == 0
    for layer in layers:
        assert layer[padding].abs().max() == 0
        assert layer[~padding].abs().amax(dim=-1).gt(0).all()


def test_a_sentence_does_not_depend_on_batch_mates_padding_or_history(tokenizer):
    model = tiny_model()
    alone = model(**encode(tokenizer, SENTENCES[:1]), output_hidden_states=True).hidden_states
    in_batch = model(**encode(tokenizer, SENTENCES[::-1], pad_to_multiple_of=16), output_hidden_states=True)
    again = model(**encode(tokenizer, SENTENCES[:1]), output_hidden_states=True).hidden_states
    length = alone[0].shape[1]
    for layer_alone, layer_batch, layer_again in zip(alone, in_batch.hidden_states, again):
        # Equal up to float32 rounding: BLAS may block a matmul differently for another batch size.
        assert torch.allclose(layer_alone[0], layer_batch[2, :length], atol=1e-6)
        assert torch.equal(layer_alone, layer_again)


def test_lstm_states_continue_each_row(tokenizer):
    """The forward direction of B after A's carried state equals the forward direction of A+B at B's words."""
    model = tiny_model()
    first, second = ["one", "two", "three"], ["four", "five"]
    whole = model(**encode(tokenizer, [first + second], add_special_tokens=False)).last_hidden_state
    state = model(**encode(tokenizer, [first], add_special_tokens=False)).lstm_states
    continued = model(**encode(tokenizer, [second], add_special_tokens=False), lstm_states=state).last_hidden_state
    fresh = model(**encode(tokenizer, [second], add_special_tokens=False)).last_hidden_state
    assert torch.allclose(continued[0, :, :8], whole[0, 3:, :8], atol=1e-6)
    assert (fresh[0, :, :8] - whole[0, 3:, :8]).abs().max() > 1e-3


def test_final_state_is_taken_after_each_rows_last_word(tokenizer):
    model = tiny_model()
    batched = model(**encode(tokenizer, SENTENCES)).lstm_states
    for row, sentence in enumerate(SENTENCES):
        alone = model(**encode(tokenizer, [sentence])).lstm_states
        for state_batched, state_alone in zip(batched, alone):
            assert torch.allclose(state_batched[:, :, row], state_alone[:, :, 0], atol=1e-6)


def test_gradients_reach_every_parameter(tokenizer):
    model = tiny_model().train()
    model(**encode(tokenizer, SENTENCES)).last_hidden_state.sum().backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


@pytest.mark.parametrize(
    "options",
    [
        dict(cell_clip=None, proj_clip=None),
        dict(num_highway_layers=0),
        dict(use_skip_connections=False, activation="tanh"),
        dict(use_skip_connections=False, activation="tanh", num_highway_layers=0, cell_clip=None, proj_clip=None),
    ],
    ids=["no_clips", "no_highway", "tanh_no_skip", "all_off"],
)
def test_config_options_equal_the_numpy_reference_of_bilm_tf(tokenizer, options):
    """Random weights in bilm-tf's hdf5 layout, converted, against the converter's NumPy transcription of bilm-tf's
    arithmetic (TF gate order, forget bias 1.0, optional clips, highways, skip connections)."""
    from elmo_hf.convert.convert_bilm_tf import bilm_tf_reference_layers, hdf5_key_table
    from elmo_hf.convert.convert_common import build_model, convert_weights

    config = tiny_config(**options)
    rng = np.random.default_rng(0)
    arrays = {
        entry.source: rng.normal(0.0, 0.5, entry.source_shape).astype(np.float32) for entry in hdf5_key_table(config)
    }
    model = build_model(config, convert_weights(arrays, config, hdf5_key_table(config)))
    batch = encode(tokenizer, SENTENCES)
    with torch.no_grad():
        layers = torch.stack(model(**batch, output_hidden_states=True).hidden_states, dim=1)  # (B, L+1, W, 2P)
    assert layers.shape[1] == 3
    for row, length in enumerate(batch["attention_mask"].sum(dim=1).tolist()):
        expected = bilm_tf_reference_layers(arrays, config, batch["input_ids"][row, :length].numpy())
        np.testing.assert_allclose(layers[row, :, :length].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_left_padding_is_rejected(tokenizer):
    model = tiny_model()
    batch = encode(tokenizer, SENTENCES, padding_side="left")
    with pytest.raises(ValueError, match="ElmoModel needs right padding"):
        model(**batch)


@pytest.mark.parametrize(
    "shape, message",
    [((2, 5), r"input_ids must have shape \(batch, words, 20\)"), ((2, 5, 50), r"got \(2, 5, 50\)")],
)
def test_wrong_input_shape(shape, message):
    with pytest.raises(ValueError, match=message):
        tiny_model()(input_ids=torch.ones(shape, dtype=torch.long))


def test_wrong_lstm_state_shape(tokenizer):
    model = tiny_model()
    cell, hidden = model(**encode(tokenizer, SENTENCES)).lstm_states
    with pytest.raises(ValueError, match=r"lstm_states must have shapes \(2, 2, 3, 16\) and \(2, 2, 3, 8\)"):
        model(**encode(tokenizer, SENTENCES[:1]), lstm_states=(cell, hidden[:, :, :2]))


def test_save_and_load_round_trip_with_safetensors_only(tmp_path, tokenizer):
    model = tiny_model()
    model.save_pretrained(tmp_path)
    files = {path.name for path in tmp_path.iterdir()}
    assert "model.safetensors" in files and not any(name.endswith((".bin", ".pt", ".pkl")) for name in files)
    assert {"configuration_elmo.py", "modeling_elmo.py"} <= files
    loaded = ElmoModel.from_pretrained(tmp_path).eval()
    batch = encode(tokenizer, SENTENCES)
    assert torch.equal(model(**batch).last_hidden_state, loaded(**batch).last_hidden_state)


def test_auto_classes(tmp_path, tokenizer):
    model = tiny_model()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    config = AutoConfig.from_pretrained(tmp_path)
    assert type(config) is ElmoConfig and config.auto_map["AutoModel"] == "modeling_elmo.ElmoModel"
    loaded = AutoModel.from_pretrained(tmp_path)
    assert type(loaded) is ElmoModel
    assert type(AutoTokenizer.from_pretrained(tmp_path)).__name__ == "ElmoTokenizer"
    assert type(AutoModel.from_config(tiny_config())) is ElmoModel


def test_new_model_initialisation_follows_bilm_tf():
    model = ElmoModel(tiny_config())
    layer = model.encoder.layers[0]
    assert torch.equal(layer.bias[:, 16:32], torch.ones(2, 16)) and not layer.bias[:, :16].any()
    assert torch.equal(model.character_encoder.highways[0].gate.bias, torch.full((20,), -2.0))
    assert not model.character_encoder.char_embedding[0].any()
    assert model.character_encoder.char_embedding[1:].abs().max() > 0.5
