"""The model on a CUDA device: the same layers and gradients as on the CPU (the CUDA path uses the plain batched
products; the oneDNN-packed ones are CPU-only). Skipped where torch sees no GPU."""

import h5py
import pytest
import torch
from helpers import WEIGHT_SETS, assert_close, stateful_batches, tiny_model_and_batch

from elmo_hf.original_tf import convert_hdf5

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
