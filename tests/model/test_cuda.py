"""The model on a CUDA device: the same layers and gradients as on the CPU (the CUDA path uses the plain batched
products; the oneDNN-packed ones are CPU-only). Skipped where torch sees no GPU."""

import gc

import h5py
import pytest
import torch
from helpers import WEIGHT_SETS, assert_close, random_batch, stateful_batches, tiny_model, tiny_model_and_batch

from elmo_hf.convert.convert_bilm_tf import convert_hdf5
from elmo_hf.model import cuda_graphs, cuda_kernels

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")


def test_cuda_layers_and_state_equal_the_cpu():
    model, input_ids = tiny_model_and_batch(model_seed=12, batch_seed=9, batch=5, max_words=8)
    model = model.double()
    with torch.no_grad():
        expected = model(input_ids, output_hidden_states=True)
        on_gpu = model.to("cuda")(input_ids.to("cuda"), output_hidden_states=True)
    for cpu_layer, gpu_layer in zip(expected.hidden_states, on_gpu.hidden_states):
        assert gpu_layer.device.type == "cuda"
        torch.testing.assert_close(gpu_layer.cpu(), cpu_layer, rtol=0, atol=1e-10)
    for cpu_state, gpu_state in zip(expected.lstm_states, on_gpu.lstm_states):
        torch.testing.assert_close(gpu_state.cpu(), cpu_state, rtol=0, atol=1e-10)


def test_cuda_gradients_equal_the_cpu():
    model, input_ids = tiny_model_and_batch(model_seed=13, batch_seed=10, batch=4, max_words=6)
    model = model.double()

    def gradients(device):
        model.to(device).zero_grad()
        hidden_states = model(input_ids.to(device), output_hidden_states=True).hidden_states
        torch.stack(hidden_states).pow(2).sum().backward()
        # A copy: on the CPU `.cpu()` returns the gradient itself, which the next `model.to("cuda")` moves along
        # (torch swaps parameters and their gradients in place), and CPU vs CUDA would then compare CUDA with itself.
        return {name: parameter.grad.to("cpu", copy=True) for name, parameter in model.named_parameters()}

    expected = gradients("cpu")
    for name, gradient in gradients("cuda").items():
        torch.testing.assert_close(
            gradient, expected[name], rtol=0, atol=1e-9, msg=lambda detail, name=name: f"{name}: {detail}"
        )


@pytest.mark.parametrize("name", WEIGHT_SETS)
def test_cuda_float32_matches_bilm_tf(name, fixtures_dir):
    """The published TF outputs, reproduced on the GPU in float32 (state carried, as bilm-tf does), at
    numpy.allclose(atol=1e-6): the CUDA path is as faithful as the CPU one, not only self-consistent."""
    folder, all_layers_file = WEIGHT_SETS[name]
    model, tokenizer, _ = convert_hdf5(
        fixtures_dir / folder / "options.json", fixtures_dir / folder / "lm_weights.hdf5"
    )
    expected = h5py.File(fixtures_dir / "bilm_tf_all_layers" / all_layers_file, "r")
    for index, _, output in stateful_batches(fixtures_dir, model.to("cuda"), tokenizer, device="cuda"):
        layers = torch.stack(output.hidden_states, dim=1).cpu().numpy()  # (batch, layers, words, 2 * proj)
        for row in range(3):
            reference = expected[f"b{index}_k{row}"][...]  # (layers, words without boundaries, 2 * proj)
            assert_close(layers[row, :, 1 : reference.shape[1] + 1], reference, f"{name} on cuda b{index}_k{row}")


def test_cuda_graphs_replay_the_reference_loop():
    """Inference on the GPU replays CUDA graphs (one per padded shape, shared memory pool); every layer and the
    state equal the plain loop's, for repeated shapes, shapes sharing a graph, and after the weights moved away and
    back (new storage: captured again)."""
    model = tiny_model(seed=14).double().to("cuda")
    chars = model.config.max_characters_per_token
    generator = torch.Generator().manual_seed(11)
    batches = [random_batch(generator, batch, words, chars)[0] for batch, words in [(5, 8), (3, 6), (5, 8), (1, 3)]]
    batches.append(random_batch(generator, 32, 17, chars)[0])

    def outputs(implementation):
        model.config.lstm_implementation = implementation
        with torch.no_grad():
            return [model(input_ids.to("cuda"), output_hidden_states=True) for input_ids in batches]

    for _ in range(2):
        expected = outputs("reference")
        replayed = outputs("auto")
        captured = cuda_graphs._GRAPHS[model.encoder].graphs
        assert captured and all(padded.graph is not None for padded in captured.values())
        for plain, graph in zip(expected, replayed):
            for plain_layer, graph_layer in zip(plain.hidden_states, graph.hidden_states):
                torch.testing.assert_close(graph_layer, plain_layer, rtol=0, atol=1e-12)
            for plain_state, graph_state in zip(plain.lstm_states, graph.lstm_states):
                torch.testing.assert_close(graph_state, plain_state, rtol=0, atol=1e-12)
        model.cpu().to("cuda")


@pytest.mark.parametrize(("dtype", "tolerance"), [(torch.float32, 1e-5), (torch.bfloat16, 0.05)])
def test_cuda_graphs_in_float32_and_bfloat16(dtype, tolerance):
    model, input_ids = tiny_model_and_batch(model_seed=15, batch_seed=12, batch=7, max_words=11)
    model = model.to("cuda", dtype)
    input_ids = input_ids.to("cuda")
    with torch.no_grad():
        replayed = model(input_ids, output_hidden_states=True).hidden_states
        model.config.lstm_implementation = "reference"
        plain = model(input_ids, output_hidden_states=True).hidden_states
    # Triton comes with PyTorch's CUDA wheels: the graphs run the fused step (cuda_kernels.py).
    assert {padded.implementation for padded in cuda_graphs._GRAPHS[model.encoder].graphs.values()} == {"fused"}
    for plain_layer, graph_layer in zip(plain, replayed):
        assert graph_layer.dtype == dtype
        torch.testing.assert_close(graph_layer.float(), plain_layer.float(), rtol=0, atol=tolerance)


def test_cuda_fused_step_on_a_wide_cell_as_close_to_float64_as_the_reference_step():
    """The compiled kernels with several programs per row (a cell of 1,100 columns, clips on): in float32 they are as
    close to the float64 reference as the float32 reference step is."""
    model = tiny_model(seed=18, lstm_dim=1100, projection_dim=40).to("cuda")
    layer = model.encoder.layers[0]
    generator = torch.Generator().manual_seed(18)
    lengths = torch.tensor([9, 1, 0, 5])
    mask = (torch.arange(9).unsqueeze(0) < lengths.unsqueeze(1)).to("cuda")
    inputs = (torch.randn(2, 4, 9, 40, generator=generator) * 3).to("cuda") * mask.unsqueeze(-1)
    cell, hidden = torch.randn(2, 4, 1100, device="cuda"), torch.randn(2, 4, 40, device="cuda")
    with torch.no_grad():
        reference, (reference_cell, _) = layer(inputs, mask, cell, hidden)
        fused, (fused_cell, _) = cuda_kernels.fused_layer_forward(layer, inputs, mask, cell, hidden)
        exact, (exact_cell, _) = layer.double()(inputs.double(), mask, cell.double(), hidden.double())
    assert (fused.double() - exact).abs().max() <= 2 * (reference.double() - exact).abs().max() + 1e-6
    assert (fused_cell.double() - exact_cell).abs().max() <= 2 * (
        reference_cell.double() - exact_cell
    ).abs().max() + 1e-6
    assert not fused[:, ~mask].any()
    torch.testing.assert_close(fused_cell[:, 2], cell[:, 2], rtol=0, atol=0)  # the empty row keeps its state


def test_cuda_graphs_of_a_second_model_after_the_first_is_freed():
    """Each model's graphs have their own memory pool: a model captured after another one's graphs (and pool) were
    freed runs (a pool shared between models failed its capture then)."""
    for seed in (16, 17):
        model, input_ids = tiny_model_and_batch(model_seed=seed, batch_seed=seed, batch=3, max_words=5)
        model = model.to("cuda")
        with torch.no_grad():
            replayed = model(input_ids.to("cuda")).last_hidden_state
            model.config.lstm_implementation = "reference"
            plain = model(input_ids.to("cuda")).last_hidden_state
        torch.testing.assert_close(replayed, plain, rtol=0, atol=1e-5)
        del model
        gc.collect()
