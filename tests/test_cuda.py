"""The model on a CUDA device: the same layers and gradients as on the CPU (the CUDA path uses the plain batched
products; the oneDNN-packed ones are CPU-only). Skipped where torch sees no GPU."""

import pytest
import torch

from test_fast_path import tiny_model_and_batch

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
        return {name: parameter.grad.cpu() for name, parameter in model.named_parameters()}

    expected = gradients("cpu")
    for name, gradient in gradients("cuda").items():
        torch.testing.assert_close(gradient, expected[name], rtol=0, atol=1e-9, msg=name)
