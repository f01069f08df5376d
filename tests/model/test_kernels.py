"""The CPU inference kernels of cpu_kernels.py (the path of a call without gradients on a CPU) against two oracles,
on tiny random models and batches of mixed lengths whose words repeat:
- a plain reference written here: one sentence at a time, one word at a time, one LSTM step at a time, with conv1d
  and matrix-vector products (float64, so only summation order differs), layers, final states and gradients;
- the reference path of modeling_elmo.py (training, CUDA, gradients), forced through the one predicate that chooses
  a path, in float32 and float64, with initial states, a token cache and one-word sentences.
Then the prepacked oneDNN products: their fallback to the plain products, and the cached weight copies."""

import copy

import pytest
import torch
import torch.nn.functional as F
from helpers import random_batch, tiny_model, tiny_model_and_batch

from elmo_hf.model import cpu_kernels, weight_cache
from elmo_hf.model.lstm_paths import ALL_LSTM_FUNCTIONS, lstm_path

# Against a step-by-step reference.


def reference_sentence(model, char_ids, initial_state=None):
    r"""
    Every layer of one sentence and the final LSTM state, computed step by step.

    Args:
        model (`ElmoModel`): supplies the parameters.
        char_ids (`(words, chars)`): the sentence's words, no padding.
        initial_state (optional tuple `(cell (layers, 2, lstm_dim), hidden (layers, 2, projection_dim))`).

    Returns:
        layers `(num_lstm_layers + 1, words, 2 * projection_dim)` and the final `(cell, hidden)` state.
    """
    config, encoder = model.config, model.character_encoder
    activation = torch.relu if config.activation == "relu" else torch.tanh
    tokens = []
    for word in char_ids:
        chars = F.embedding(word, encoder.char_embedding, padding_idx=0).t()  # (char_dim, chars)
        features = [
            activation(F.conv1d(chars[None], conv.weight, conv.bias)[0].max(dim=1).values)
            for conv in encoder.convolutions
        ]
        x = torch.cat(features)
        for highway in encoder.highways:
            gate = torch.sigmoid(highway.gate.weight @ x + highway.gate.bias)
            x = gate * torch.relu(highway.transform.weight @ x + highway.transform.bias) + (1 - gate) * x
        if encoder.projection is not None:
            x = encoder.projection.weight @ x + encoder.projection.bias
        tokens.append(x)
    token = torch.stack(tokens)  # (words, projection_dim)

    layers = [torch.cat([token, token], dim=-1)]
    inputs = [token, token.flip(0)]
    final_cells, final_hiddens = [], []
    for index, layer in enumerate(model.encoder.layers):
        outputs = []
        for direction in (0, 1):
            if initial_state is None:
                cell = token.new_zeros(config.lstm_dim)
                hidden = token.new_zeros(config.projection_dim)
            else:
                cell, hidden = initial_state[0][index, direction], initial_state[1][index, direction]
            steps = []
            for x in inputs[direction]:
                gates = (
                    x @ layer.input_weight[direction]
                    + hidden @ layer.recurrent_weight[direction]
                    + layer.bias[direction]
                )
                input_gate, forget_gate, candidate, output_gate = gates.chunk(4)
                cell = torch.sigmoid(forget_gate) * cell + torch.sigmoid(input_gate) * torch.tanh(candidate)
                if config.cell_clip is not None:
                    cell = cell.clamp(-config.cell_clip, config.cell_clip)
                hidden = (torch.sigmoid(output_gate) * torch.tanh(cell)) @ layer.projection_weight[direction]
                if config.proj_clip is not None:
                    hidden = hidden.clamp(-config.proj_clip, config.proj_clip)
                steps.append(hidden)
            output = torch.stack(steps)
            if config.use_skip_connections and index > 0:
                output = output + inputs[direction]
            outputs.append(output)
            final_cells.append(cell)
            final_hiddens.append(hidden)
        inputs = outputs
        layers.append(torch.cat([outputs[0], outputs[1].flip(0)], dim=-1))
    final_state = (
        torch.stack(final_cells).view(-1, 2, config.lstm_dim),
        torch.stack(final_hiddens).view(-1, 2, config.projection_dim),
    )
    return torch.stack(layers), final_state


@pytest.mark.parametrize(
    "skip, activation, with_state, one_word_cnn_pieces",
    [(True, "relu", False, False), (False, "tanh", True, True)],
)
def test_fast_path_equals_step_by_step_reference(skip, activation, with_state, one_word_cnn_pieces, monkeypatch):
    model = tiny_model(seed=3, use_skip_connections=skip, activation=activation).double()
    generator = torch.Generator().manual_seed(11)
    input_ids, lengths = random_batch(generator, batch=6, max_words=9, chars=model.config.max_characters_per_token)
    cnn_pieces = []
    convolve = model.character_encoder.convolve
    counted_convolve = lambda chars, *weights: cnn_pieces.append(len(chars)) or convolve(chars, *weights)  # noqa: E731
    monkeypatch.setattr(model.character_encoder, "convolve", counted_convolve)
    if one_word_cnn_pieces:
        monkeypatch.setattr(cpu_kernels, "CNN_RESPONSE_BYTES", 1)
    first_layer = model.encoder.layers[0]
    first_layer_rows = []
    input_gates = first_layer.input_gates
    counted_input_gates = lambda inputs: first_layer_rows.append(inputs.shape[1]) or input_gates(inputs)  # noqa: E731
    monkeypatch.setattr(first_layer, "input_gates", counted_input_gates)
    batch, layers = input_ids.shape[0], model.config.num_lstm_layers
    state = None
    if with_state:
        state = (
            torch.randn(layers, 2, batch, model.config.lstm_dim, generator=generator, dtype=torch.float64),
            torch.randn(layers, 2, batch, model.config.projection_dim, generator=generator, dtype=torch.float64),
        )

    with torch.no_grad():
        output = model(input_ids, output_hidden_states=True, lstm_states=state)
        fast = torch.stack(output.hidden_states, dim=1)  # (batch, layers + 1, words, 2 * projection_dim)
        for row, length in enumerate(lengths.tolist()):
            row_state = None if state is None else (state[0][:, :, row], state[1][:, :, row])
            expected, (cell, hidden) = reference_sentence(model, input_ids[row, :length], row_state)
            torch.testing.assert_close(fast[row, :, :length], expected, rtol=0, atol=1e-10)
            assert torch.all(fast[row, :, length:] == 0)
            torch.testing.assert_close(output.lstm_states[0][:, :, row], cell, rtol=0, atol=1e-10)
            torch.testing.assert_close(output.lstm_states[1][:, :, row], hidden, rtol=0, atol=1e-10)
    distinct_words = len(torch.unique(input_ids[input_ids.any(-1)], dim=0))
    assert cnn_pieces == ([1] * distinct_words if one_word_cnn_pieces else [distinct_words])
    assert first_layer_rows == [distinct_words] and distinct_words < int(lengths.sum())  # once per distinct word


@pytest.mark.parametrize(
    "options",
    [
        dict(cell_clip=None, proj_clip=None),
        dict(cell_clip=0.5, proj_clip=0.25),
        dict(num_highway_layers=0),
        dict(use_skip_connections=False, activation="tanh"),
        dict(use_skip_connections=False, activation="tanh", num_highway_layers=0, cell_clip=None, proj_clip=None),
    ],
    ids=["no_clips", "tight_clips", "no_highway", "tanh_no_skip", "all_off"],
)
def test_config_options_equal_the_reference(options):
    model = tiny_model(seed=4, **options).double()
    input_ids, lengths = random_batch(
        torch.Generator().manual_seed(3), batch=3, max_words=7, chars=model.config.max_characters_per_token
    )
    with torch.no_grad():
        fast = torch.stack(model(input_ids, output_hidden_states=True).hidden_states, dim=1)  # (B, L+1, W, 2P)
        for row, length in enumerate(lengths.tolist()):
            expected, _ = reference_sentence(model, input_ids[row, :length])
            torch.testing.assert_close(fast[row, :, :length], expected, rtol=0, atol=1e-10)
    if set(options) == {"cell_clip", "proj_clip"}:  # the clips act on this model: the default ones (3.0) differ
        with torch.no_grad():
            default = torch.stack(tiny_model(seed=4).double()(input_ids, output_hidden_states=True).hidden_states, 1)
        assert (default - fast).abs().max() > 1e-3


def test_fast_path_gradients_equal_reference():
    model = tiny_model(seed=5).double()
    generator = torch.Generator().manual_seed(2)
    input_ids, lengths = random_batch(generator, batch=4, max_words=6, chars=model.config.max_characters_per_token)
    weights = torch.randn(
        4,
        model.config.num_lstm_layers + 1,
        6,
        2 * model.config.projection_dim,
        generator=generator,
        dtype=torch.float64,
    )

    model.zero_grad()
    fast = torch.stack(model(input_ids, output_hidden_states=True).hidden_states, dim=1)
    (fast * weights).sum().backward()
    fast_gradients = {name: parameter.grad.clone() for name, parameter in model.named_parameters()}

    model.zero_grad()
    loss = 0
    for row, length in enumerate(lengths.tolist()):
        expected, _ = reference_sentence(model, input_ids[row, :length])
        loss = loss + (expected * weights[row, :, :length]).sum()
    loss.backward()
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(fast_gradients[name], parameter.grad, rtol=0, atol=1e-9, msg=name)


# Against the reference path of modeling_elmo.py.


def both_paths(model, input_ids, monkeypatch, **kwargs):
    """(reference output, kernel output) of `model(input_ids, output_hidden_states=True, **kwargs)` without
    gradients, each path requested through `config.lstm_implementation`."""
    outputs = []
    for implementation in ("reference", "auto"):
        monkeypatch.setattr(model.config, "lstm_implementation", implementation)
        with torch.no_grad():
            outputs.append(model(input_ids, output_hidden_states=True, **kwargs))
    return outputs


def assert_within_float32_rounding(kernel, reference):
    """docs/guarantees.md: within 1e-6 times the largest absolute value (1e-6 absolute when values stay within 1)."""
    bound = 1e-6 * max(1.0, float(reference.abs().max()))
    torch.testing.assert_close(kernel, reference, rtol=0, atol=bound)


def random_states(generator, model, rows, dtype=torch.float32):
    layers, config = model.config.num_lstm_layers, model.config
    return (
        torch.randn(layers, 2, rows, config.lstm_dim, generator=generator, dtype=dtype),
        torch.randn(layers, 2, rows, config.projection_dim, generator=generator, dtype=dtype),
    )


@pytest.mark.parametrize(
    "config, state_rows",
    [
        (dict(), None),
        (dict(use_skip_connections=True), 6),
        (dict(use_skip_connections=False, activation="tanh"), 3),  # fewer state rows than the batch
        (dict(cell_clip=None, proj_clip=None), 9),  # more state rows than the batch: carried through
        (dict(cell_clip=None, proj_clip=None, use_skip_connections=True, num_lstm_layers=3), None),
    ],
)
@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, None), (torch.float64, 1e-12)])
def test_kernels_equal_the_reference_path(config, state_rows, dtype, tolerance, monkeypatch):
    model = tiny_model(seed=21, **config).to(dtype)
    generator = torch.Generator().manual_seed(5)
    input_ids, lengths = random_batch(generator, batch=6, max_words=8, chars=model.config.max_characters_per_token)
    lengths[1] = 1  # a one-word sentence
    input_ids[1, 1:] = 0
    states = None if state_rows is None else random_states(generator, model, state_rows, dtype)

    reference, kernel = both_paths(model, input_ids, monkeypatch, lstm_states=states)
    padding = torch.arange(input_ids.shape[1]) >= lengths.unsqueeze(1)  # (batch, words)
    pairs = [*zip(kernel.hidden_states, reference.hidden_states), *zip(kernel.lstm_states, reference.lstm_states)]
    for kernel_tensor, reference_tensor in pairs:
        if tolerance is None:
            assert_within_float32_rounding(kernel_tensor, reference_tensor)
        else:
            torch.testing.assert_close(kernel_tensor, reference_tensor, rtol=0, atol=tolerance)
    for kernel_layer, reference_layer in zip(kernel.hidden_states, reference.hidden_states):
        assert torch.all(kernel_layer[padding] == 0) and torch.all(reference_layer[padding] == 0)
    if state_rows is not None and state_rows > 6:
        for returned, passed in zip(reference.lstm_states + kernel.lstm_states, states + states):
            assert torch.equal(returned[:, :, 6:], passed[:, :, 6:])  # rows past the batch come back unchanged


def test_a_batch_of_one_one_word_sentence(monkeypatch):
    model = tiny_model(seed=4)
    input_ids = torch.zeros(1, 1, model.config.max_characters_per_token, dtype=torch.long)
    input_ids[0, 0, :4] = torch.tensor([259, 70, 80, 260])
    reference, kernel = both_paths(model, input_ids, monkeypatch)
    for kernel_tensor, reference_tensor in zip(
        kernel.hidden_states + kernel.lstm_states, reference.hidden_states + reference.lstm_states
    ):
        assert_within_float32_rounding(kernel_tensor, reference_tensor)


def test_a_token_cache_gives_the_same_vectors_on_both_paths(monkeypatch):
    from elmo_hf import ElmoTokenCache

    model = tiny_model(seed=6)
    input_ids, _ = random_batch(
        torch.Generator().manual_seed(3), batch=4, max_words=7, chars=model.config.max_characters_per_token
    )
    known = input_ids[0, :3]  # some words of the batch; the others go through the character encoder
    cache = ElmoTokenCache(model.character_encoder, known)
    without_cache, _ = both_paths(model, input_ids, monkeypatch)
    for with_cache in both_paths(model, input_ids, monkeypatch, token_cache=cache):
        for cached, plain in zip(with_cache.hidden_states, without_cache.hidden_states):
            assert_within_float32_rounding(cached, plain)


def test_the_resolver_chooses_the_kernels_only_for_cpu_inference():
    model = tiny_model(seed=1)
    input_ids = torch.ones(2, 3, model.config.max_characters_per_token, dtype=torch.long)
    states = random_states(torch.Generator().manual_seed(0), model, 2)
    with torch.no_grad():
        assert lstm_path(model, input_ids, None, 0.0) == "cpu_kernels"
        assert lstm_path(model, input_ids, states, 0.0) == "cpu_kernels"
        assert lstm_path(model, input_ids, None, 0.1) == "reference"  # dropout: training
    with torch.inference_mode():
        assert lstm_path(model, input_ids, None, 0.0) == "cpu_kernels"
    assert lstm_path(model, input_ids, None, 0.0) == "packed"  # trainable parameters, grad mode
    assert lstm_path(model, input_ids.to("meta"), None, 0.0) == "packed"  # not on the CPU
    model.requires_grad_(False)
    assert lstm_path(model, input_ids, states, 0.0) == "cpu_kernels"  # a frozen biLM
    assert lstm_path(model, input_ids, (states[0].requires_grad_(), states[1]), 0.0) == "packed"


def test_a_call_that_needs_gradients_runs_the_reference_path(monkeypatch):
    model = tiny_model(seed=2)
    input_ids, _ = random_batch(
        torch.Generator().manual_seed(1), batch=3, max_words=5, chars=model.config.max_characters_per_token
    )

    def kernel_path(*args):
        raise RuntimeError("the kernel path ran")

    monkeypatch.setitem(ALL_LSTM_FUNCTIONS, "cpu_kernels", kernel_path)
    assert model(input_ids).last_hidden_state.requires_grad
    with torch.no_grad(), pytest.raises(RuntimeError, match="the kernel path ran"):
        model(input_ids)


# The prepacked oneDNN products and the cached weight copies.


def _forward_float32(model, input_ids, needs_gradient):
    """Every layer (batch, layers + 1, words, 2 * proj): under no_grad (the packed oneDNN product) or with
    gradients (the plain batched product)."""
    with torch.set_grad_enabled(needs_gradient):
        return torch.stack(model(input_ids, output_hidden_states=True).hidden_states, dim=1).detach()


needs_onednn = pytest.mark.skipif(
    not cpu_kernels.onednn_products_available(), reason="this torch has no working oneDNN linear operators"
)


def test_without_the_private_onednn_operators_the_plain_products_give_the_same_vectors(monkeypatch):
    """A PyTorch without `torch.ops.mkldnn._linear_pointwise` (or with a changed one) falls back to baddbmm/bmm."""
    model = tiny_model(seed=7)
    generator = torch.Generator().manual_seed(4)
    input_ids, _ = random_batch(generator, batch=7, max_words=10, chars=model.config.max_characters_per_token)
    usual = _forward_float32(model, input_ids, needs_gradient=False)
    monkeypatch.setattr(cpu_kernels, "onednn_products_available", lambda: False)
    weight_cache._COPIES.clear()
    fallback = _forward_float32(model, input_ids, needs_gradient=False)
    for layer in model.encoder.layers:
        assert not any(layout == "onednn" for _, layout in weight_cache._COPIES.get(layer, {}))
    torch.testing.assert_close(fallback, usual, rtol=1e-5, atol=1e-6)


def test_the_onednn_probe_refuses_operators_that_fail(monkeypatch):
    cpu_kernels.onednn_products_available.cache_clear()
    try:
        monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", None, raising=False)
        assert cpu_kernels.onednn_products_available() is False
    finally:
        monkeypatch.undo()
        cpu_kernels.onednn_products_available.cache_clear()


@needs_onednn
def test_prepacked_products_equal_the_plain_products_in_float32():
    model = tiny_model(seed=7)
    generator = torch.Generator().manual_seed(4)
    input_ids, lengths = random_batch(generator, batch=7, max_words=10, chars=model.config.max_characters_per_token)
    packed = _forward_float32(model, input_ids, needs_gradient=False)
    for layer in model.encoder.layers:
        assert set(weight_cache._COPIES[layer]) == {
            ("recurrent_weight", "onednn"),
            ("projection_weight", "onednn"),
        }
    plain = _forward_float32(model, input_ids, needs_gradient=True)
    # Two different products: rounding may differ (or not, depending on the CPU and oneDNN build).
    torch.testing.assert_close(packed, plain, rtol=1e-5, atol=1e-6)
    expected, _ = reference_sentence(model.double(), input_ids[0, : lengths[0]])
    torch.testing.assert_close(packed[0, :, : lengths[0]].double(), expected, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_a_single_sentence_builds_no_packed_weights():
    model, input_ids = tiny_model_and_batch(model_seed=10, batch_seed=7, batch=1, max_words=6)
    single = _forward_float32(model, input_ids, needs_gradient=False)
    # One row copies only the projection weight, transposed.
    for layer in model.encoder.layers:
        assert set(weight_cache._COPIES[layer]) == {("projection_weight", "transposed")}
    # The call with gradients runs the reference path (every position, not once per distinct word): rounding differs.
    torch.testing.assert_close(single, _forward_float32(model, input_ids, needs_gradient=True), rtol=1e-5, atol=1e-6)
    _forward_float32(model, input_ids.repeat(2, 1, 1), needs_gradient=False)  # two rows: packed from here on
    for layer in model.encoder.layers:
        assert ("recurrent_weight", "onednn") in weight_cache._COPIES[layer]


@pytest.mark.parametrize(
    "batch", [pytest.param(5, marks=needs_onednn, id="packed"), pytest.param(1, id="one row, transposed copy")]
)
def test_weight_copies_follow_weight_changes(batch):
    model, input_ids = tiny_model_and_batch(model_seed=8, batch_seed=5, batch=batch, max_words=6)
    before = _forward_float32(model, input_ids, needs_gradient=False)
    with torch.no_grad():
        model.encoder.layers[1].recurrent_weight.mul_(-0.5)  # in place
        model.encoder.layers[0].projection_weight.mul_(1.5)
    changed = _forward_float32(model, input_ids, needs_gradient=False)
    torch.testing.assert_close(changed, _forward_float32(model, input_ids, needs_gradient=True), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(changed, before)

    model.load_state_dict(tiny_model(seed=8).state_dict())  # back to the original weights
    torch.testing.assert_close(_forward_float32(model, input_ids, needs_gradient=False), before, rtol=0, atol=0)


@needs_onednn
def test_a_model_that_has_used_packed_weights_still_copies_and_saves(tmp_path):
    model, input_ids = tiny_model_and_batch(model_seed=9, batch_seed=6, batch=3, max_words=5)
    expected = _forward_float32(model, input_ids, needs_gradient=False)
    copied = copy.deepcopy(model)
    model.save_pretrained(tmp_path)
    for other in (copied, type(model).from_pretrained(tmp_path)):
        torch.testing.assert_close(_forward_float32(other, input_ids, needs_gradient=False), expected, rtol=0, atol=0)
