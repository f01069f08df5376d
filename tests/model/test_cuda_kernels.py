"""The fused LSTM step of the CUDA graphs (`cuda_kernels.py`) against the reference step, run on the CPU through
Triton's interpreter (tests/model/test_cuda.py runs the compiled kernels on a GPU)."""

import importlib
import warnings

import pytest
import torch
from helpers import tiny_model

from elmo_hf.model import cuda_graphs, cuda_kernels
from elmo_hf.model.lstm_paths import resolve_lstm_path

pytest.importorskip("triton", reason="Triton is in the test extras (pip install -e '.[test]')")
from elmo_hf.model import triton_lstm_kernels  # noqa: E402 (after the skip: it imports Triton)


@pytest.fixture
def interpreted(monkeypatch):
    """The kernels redefined under TRITON_INTERPRET=1 (Triton reads it when a kernel is defined), and restored."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    importlib.reload(triton_lstm_kernels)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "overflow encountered in exp")  # tanh's exp at +-inf is exact
        yield
    monkeypatch.delenv("TRITON_INTERPRET")
    importlib.reload(triton_lstm_kernels)


def layer_and_batch(seed, lengths, cell_clip, proj_clip, dtype=torch.float32, **sizes):
    model = tiny_model(seed=seed, cell_clip=cell_clip, proj_clip=proj_clip, **sizes).to(dtype)
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)
    mask = torch.arange(int(lengths.max())).unsqueeze(0) < lengths.unsqueeze(1)  # (batch, words)
    inputs = torch.randn(2, *mask.shape, model.config.projection_dim, generator=generator) * mask.unsqueeze(-1) * 3
    cell = torch.randn(2, len(lengths), model.config.lstm_dim, generator=generator)
    hidden = torch.randn(2, len(lengths), model.config.projection_dim, generator=generator)
    return model, model.encoder.layers[0], inputs.to(dtype), mask, cell.to(dtype), hidden.to(dtype)


@pytest.mark.parametrize("clips", [(3.0, 3.0), (None, None), (0.5, None)])
@pytest.mark.parametrize("lengths", [[1], [7, 0, 3, 1, 7], [4, 4]])
def test_fused_layer_equals_the_reference_layer(interpreted, clips, lengths):
    """Outputs (0 at padding) and the final state (kept after each row's last word, the start state for an empty
    row) equal the reference step's to float32 rounding, with the clips on and off."""
    _, layer, inputs, mask, cell, hidden = layer_and_batch(len(lengths), lengths, *clips)
    with torch.no_grad():
        expected, (expected_cell, expected_hidden) = layer(inputs, mask, cell, hidden)
        outputs, (new_cell, new_hidden) = cuda_kernels.fused_layer_forward(layer, inputs, mask, cell, hidden)
    torch.testing.assert_close(outputs, expected, rtol=0, atol=2e-6)
    assert not outputs[:, ~mask].any()
    torch.testing.assert_close(new_cell, expected_cell, rtol=0, atol=2e-6)
    torch.testing.assert_close(new_hidden, expected_hidden, rtol=0, atol=2e-6)
    empty_rows = [row for row, length in enumerate(lengths) if length == 0]
    assert torch.equal(new_cell[:, empty_rows], cell[:, empty_rows])  # untouched by padding


def test_fused_layer_wider_than_one_block(interpreted):
    """A cell of 1,100 columns takes two programs per row, the second one partly masked. Sums over 1,100 products
    carry float32's rounding further, so both steps are measured against float64: the fused one is as close."""
    _, layer, inputs, mask, cell, hidden = layer_and_batch(4, [3, 1], 3.0, 3.0, lstm_dim=1100, projection_dim=24)
    with torch.no_grad():
        reference = layer(inputs, mask, cell, hidden)
        fused = cuda_kernels.fused_layer_forward(layer, inputs, mask, cell, hidden)
        exact = layer.double()(inputs.double(), mask, cell.double(), hidden.double())
    for name, get in [
        ("outputs", lambda run: run[0]),
        ("cell", lambda run: run[1][0]),
        ("hidden", lambda run: run[1][1]),
    ]:
        reference_error = (get(reference).double() - get(exact)).abs().max()
        fused_error = (get(fused).double() - get(exact)).abs().max()
        assert fused_error <= 2 * reference_error + 1e-6, name


def test_fused_layer_in_bfloat16_stays_close_to_float32(interpreted):
    """bfloat16 storage, float32 arithmetic inside the kernels: nearer float32 than the reference step in
    bfloat16, whose every operation rounds."""
    model, layer, inputs, mask, cell, hidden = layer_and_batch(5, [6, 2, 5], 3.0, 3.0)
    with torch.no_grad():
        exact, _ = layer(inputs, mask, cell, hidden)
        layer.to(torch.bfloat16)
        halves = (inputs.bfloat16(), mask, cell.bfloat16(), hidden.bfloat16())
        fused, (fused_cell, _) = cuda_kernels.fused_layer_forward(layer, *halves)
        reference, _ = layer(*halves)
    assert fused.dtype == fused_cell.dtype == torch.bfloat16
    fused_error = (fused.float() - exact).abs().max()
    assert fused_error < 0.03
    assert fused_error <= (reference.float() - exact).abs().max()


def test_graphs_take_the_fused_step_where_it_applies(interpreted):
    """The fused step applies to float32 (the graphs of its step give the reference's layers), not to float64 nor under
    autocast, where "auto" resolves to the graphs of the reference step."""
    model, _, inputs, mask, _, _ = layer_and_batch(6, [5, 3, 1], 3.0, 3.0)
    token_layer = inputs[0]  # (batch, words, projection_dim)

    def resolved(like):
        return resolve_lstm_path(
            "auto", "cuda", fused_step_available=lambda: cuda_kernels.fused_step_apply(model.encoder, like)
        )

    with torch.no_grad():
        expected, _ = model.encoder(token_layer, mask, implementation="reference")
        assert resolved(token_layer) == "fused"
        layers, _ = cuda_graphs.graphed_bilstm_forward(model.encoder, token_layer, mask, "fused")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert resolved(token_layer) == "cuda_graphs"
        assert resolved(token_layer.double()) == "cuda_graphs"  # weights in float32, input in float64
        model.double()
        assert resolved(token_layer.double()) == "cuda_graphs"  # float64 keeps the reference step's precision
    assert [padded.implementation for padded in cuda_graphs._GRAPHS[model.encoder].graphs.values()] == ["fused"]
    for layer, expected_layer in zip(layers, expected):
        torch.testing.assert_close(layer, expected_layer, rtol=0, atol=2e-6)


def test_a_failing_fused_step_warns_once_and_the_graphs_take_the_reference_step(interpreted, monkeypatch):
    model, _, inputs, mask, _, _ = layer_and_batch(7, [4, 2], 3.0, 3.0)
    token_layer = inputs[0]

    class Uncompilable:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise ValueError("unsupported target\nmore detail")

            return launch

    monkeypatch.setattr(triton_lstm_kernels, "cell_step_kernel", Uncompilable())
    with torch.no_grad():
        expected, _ = model.encoder(token_layer, mask, implementation="reference")
        with pytest.warns(
            UserWarning, match=r"fused LSTM step failed \(unsupported target\); this model's CUDA graphs"
        ):
            first, _ = cuda_graphs.graphed_bilstm_forward(model.encoder, token_layer, mask, "fused")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once
            second, _ = cuda_graphs.graphed_bilstm_forward(model.encoder, token_layer[:1], mask[:1], "fused")
    assert [padded.implementation for padded in cuda_graphs._GRAPHS[model.encoder].graphs.values()] == ["reference"] * 2
    for layer, expected_layer in zip(first, expected):
        torch.testing.assert_close(layer, expected_layer, rtol=0, atol=0)


def test_no_fused_step_on_the_cpu_without_the_interpreter():
    model = tiny_model(seed=8)
    assert not cuda_kernels.fused_step_apply(model.encoder, torch.zeros(2, 3, model.config.projection_dim))


def test_projection_splits_divide_the_cell_into_slices_of_64_or_more_in_float32_only():
    splits = cuda_kernels.projection_splits
    assert [splits(width, torch.float32) for width in (4096, 2048, 1100, 128, 100, 16)] == [16, 16, 4, 2, 1, 1]
    assert splits(2048, torch.bfloat16) == 1
