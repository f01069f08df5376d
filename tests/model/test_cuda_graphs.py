"""The CUDA-graph path's padding and cache, run eagerly on the CPU (`cuda_graphs._PaddedBiLstm` captures only on a
CUDA device; tests/model/test_cuda.py checks the captured graphs on a GPU)."""

import warnings

import pytest
import torch
from helpers import random_batch, tiny_model

from elmo_hf.model import cuda_graphs


def token_layer_and_mask(model, batch, max_words, seed, lengths=None):
    """A random token layer `(batch, words, projection_dim)`, 0 at padding, and its mask; `lengths` overrides the
    random row lengths (0 allowed)."""
    generator = torch.Generator().manual_seed(seed)
    _, random_lengths = random_batch(generator, batch, max_words, model.config.max_characters_per_token)
    lengths = random_lengths if lengths is None else torch.tensor(lengths)
    mask = torch.arange(max_words).unsqueeze(0) < lengths.unsqueeze(1)  # (batch, words)
    inputs = torch.randn(batch, max_words, model.config.projection_dim, generator=generator, dtype=torch.float64)
    return inputs * mask.unsqueeze(-1), mask


@pytest.mark.parametrize(
    ("batch", "max_words", "lengths"),
    [(1, 1, None), (1, 9, None), (3, 7, None), (5, 8, None), (6, 13, [13, 0, 4, 1, 13, 2])],
)
def test_padded_shape_gives_the_reference_outputs_and_state(batch, max_words, lengths):
    """Padding rows to a power of two and words to a multiple of WORD_BUCKET changes nothing for the real rows:
    every layer and the final state equal the unpadded reference loop (float64, the same operations)."""
    model = tiny_model(seed=3).double()
    encoder = model.encoder
    inputs, mask = token_layer_and_mask(model, batch, max_words, seed=batch, lengths=lengths)
    expected_layers, (expected_cells, expected_hiddens) = encoder(inputs, mask, implementation="reference")
    layers, (cells, hiddens) = cuda_graphs.graphed_bilstm_forward(encoder, inputs, mask)
    assert len(layers) == len(expected_layers)
    for layer, expected in zip(layers, expected_layers):
        assert layer.shape == expected.shape
        torch.testing.assert_close(layer, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(cells, expected_cells, rtol=0, atol=1e-12)
    torch.testing.assert_close(hiddens, expected_hiddens, rtol=0, atol=1e-12)


def test_one_padded_forward_per_bucket_and_least_recently_used_dropped(monkeypatch):
    monkeypatch.setattr(cuda_graphs, "MAX_GRAPHS", 2)
    model = tiny_model(seed=4).double()
    encoder = model.encoder
    shapes = {}
    for batch, words in [(3, 5), (4, 8), (2, 5), (9, 5), (3, 6)]:
        inputs, mask = token_layer_and_mask(model, batch, words, seed=batch * 10 + words)
        shapes[(batch, words)] = cuda_graphs.graphed_bilstm_forward(encoder, inputs, mask)
    graphs = cuda_graphs._GRAPHS[encoder].graphs
    # (3, 5), (4, 8) and (3, 6) share the bucket (4 rows, 8 words); (2, 5) is (2, 8); (9, 5) is (16, 8), which
    # pushed out (2, 8), the least recently used of the three.
    assert [key[:2] for key in graphs] == [(16, 8), (4, 8)]
    # The weights are part of the key: after a dtype change the old entries are not reused.
    model.float()
    inputs, mask = token_layer_and_mask(model, 3, 5, seed=1)
    cuda_graphs.graphed_bilstm_forward(encoder, inputs.float(), mask)
    assert [key[:3] for key in graphs] == [(4, 8, torch.float64), (4, 8, torch.float32)]


def test_inference_mode_and_no_grad_each_get_their_own_padded_tensors():
    """Tensors made under torch.inference_mode cannot be written under torch.no_grad: a shape first run in one mode
    still runs in the other, with the same outputs."""
    model = tiny_model(seed=6).double()
    inputs, mask = token_layer_and_mask(model, 3, 5, seed=3)
    with torch.inference_mode():
        under_inference_mode = cuda_graphs.graphed_bilstm_forward(model.encoder, inputs, mask)
    with torch.no_grad():
        under_no_grad = cuda_graphs.graphed_bilstm_forward(model.encoder, inputs, mask)
    for first, second in zip(under_inference_mode[0], under_no_grad[0]):
        torch.testing.assert_close(first, second, rtol=0, atol=0)


def test_reference_loop_unchanged_without_a_gpu():
    """On the CPU `ElmoModel` never takes the graph path: no graph cache entry is made by a forward."""
    model = tiny_model(seed=5)
    input_ids, _ = random_batch(torch.Generator().manual_seed(2), 3, 6, model.config.max_characters_per_token)
    with torch.no_grad():
        model(input_ids)
    assert model.encoder not in cuda_graphs._GRAPHS


def test_a_failed_capture_warns_once_and_runs_the_plain_loop(monkeypatch):
    model = tiny_model(seed=7).double()
    inputs, mask = token_layer_and_mask(model, 4, 6, seed=5)
    expected = model.encoder(inputs, mask, implementation="reference")

    def refused_capture(*args):
        raise RuntimeError("operation not permitted when stream is capturing\nmore detail")

    monkeypatch.setattr(cuda_graphs, "_PaddedBiLstm", refused_capture)
    refusal = r"capture of the biLSTM failed \(operation not permitted when stream is capturing\); this model runs"
    with pytest.warns(UserWarning, match=refusal):
        first = cuda_graphs.graphed_bilstm_forward(model.encoder, inputs, mask)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: the model no longer tries
        second = cuda_graphs.graphed_bilstm_forward(model.encoder, inputs, mask)
    for outputs in (first, second):
        for layer, expected_layer in zip(outputs[0], expected[0]):
            torch.testing.assert_close(layer, expected_layer, rtol=0, atol=0)


def test_autocast_gets_its_own_padded_forward():
    """A graph replays the casts of the autocast it was captured under: a shape run under autocast and without it
    gets an entry for each, and the run without autocast keeps float32's values."""
    model = tiny_model(seed=8)
    inputs, mask = token_layer_and_mask(model, 3, 5, seed=4)
    inputs = inputs.float()
    with torch.no_grad():
        plain = cuda_graphs.graphed_bilstm_forward(model.encoder, inputs, mask)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            cuda_graphs.graphed_bilstm_forward(model.encoder, inputs, mask)
        again = cuda_graphs.graphed_bilstm_forward(model.encoder, inputs, mask)
    assert [key[5] for key in cuda_graphs._GRAPHS[model.encoder].graphs] == [torch.bfloat16, None]
    for first, second in zip(plain[0], again[0]):
        torch.testing.assert_close(first, second, rtol=0, atol=0)
