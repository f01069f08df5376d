"""The two paths of ElmoModel against each other: the plain reference path of modeling_elmo.py (training, CUDA,
gradients) and the CPU inference kernels of cpu_kernels.py, on tiny random models and batches of mixed lengths."""

import pytest
import torch
from helpers import tiny_model
from test_fast_path import random_batch

from elmo_hf import cpu_kernels, modeling_elmo


def both_paths(model, input_ids, monkeypatch, **kwargs):
    """(reference output, kernel output) of `model(input_ids, output_hidden_states=True, **kwargs)` without
    gradients, each path forced through the one predicate that chooses it."""
    outputs = []
    for use_kernels in (False, True):
        monkeypatch.setattr(modeling_elmo, "cpu_kernels_apply", lambda *args, use=use_kernels: use)
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


def test_the_predicate_chooses_the_kernels_only_for_cpu_inference():
    model = tiny_model(seed=1)
    input_ids = torch.ones(2, 3, model.config.max_characters_per_token, dtype=torch.long)
    states = random_states(torch.Generator().manual_seed(0), model, 2)
    with torch.no_grad():
        assert cpu_kernels.cpu_kernels_apply(model, input_ids, None, 0.0)
        assert cpu_kernels.cpu_kernels_apply(model, input_ids, states, 0.0)
        assert not cpu_kernels.cpu_kernels_apply(model, input_ids, None, 0.1)  # dropout: training
    with torch.inference_mode():
        assert cpu_kernels.cpu_kernels_apply(model, input_ids, None, 0.0)
    assert not cpu_kernels.cpu_kernels_apply(model, input_ids, None, 0.0)  # trainable parameters, grad mode
    assert not cpu_kernels.cpu_kernels_apply(model, input_ids.to("meta"), None, 0.0)  # not on the CPU
    model.requires_grad_(False)
    assert cpu_kernels.cpu_kernels_apply(model, input_ids, states, 0.0)  # a frozen biLM
    assert not cpu_kernels.cpu_kernels_apply(model, input_ids, (states[0].requires_grad_(), states[1]), 0.0)


def test_a_call_that_needs_gradients_runs_the_reference_path(monkeypatch):
    model = tiny_model(seed=2)
    input_ids, _ = random_batch(
        torch.Generator().manual_seed(1), batch=3, max_words=5, chars=model.config.max_characters_per_token
    )

    def kernel_path(*args):
        raise RuntimeError("the kernel path ran")

    monkeypatch.setattr(modeling_elmo, "elmo_forward", kernel_path)
    assert model(input_ids).last_hidden_state.requires_grad
    with torch.no_grad(), pytest.raises(RuntimeError, match="the kernel path ran"):
        model(input_ids)
