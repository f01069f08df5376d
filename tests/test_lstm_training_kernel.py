"""The LSTM layer's hand-written backward (`elmo_hf/lstm_training_kernel.py`) against autograd through the readable
`ElmoBiLstmLayer.forward`, in float64: the same outputs and final state, the same gradients for every input and
weight, with and without clips, with padded rows, with a gradient on the final state."""

import pytest
import torch

from elmo_hf import ElmoConfig
from elmo_hf.modeling_elmo import ElmoBiLstm, ElmoBiLstmLayer


def random_layer(cell_clip, proj_clip):
    torch.manual_seed(0)
    layer = ElmoBiLstmLayer(6, 5, 4, cell_clip, proj_clip).double()
    for parameter in layer.parameters():
        torch.nn.init.normal_(parameter, 0.0, 0.7)  # large enough that about a fifth of the outputs clip
    return layer


def outputs_and_gradients(forward, layer, inputs, mask, cell, hidden):
    output, (final_cell, final_hidden) = forward(inputs, mask, cell, hidden)
    generator = torch.Generator().manual_seed(1)
    weights = [torch.randn(value.shape, dtype=torch.float64, generator=generator)
               for value in (output, final_cell, final_hidden)]  # fmt: skip
    loss = sum((value * weight).sum() for value, weight in zip((output, final_cell, final_hidden), weights))
    gradients = torch.autograd.grad(loss, [inputs, cell, hidden, *layer.parameters()])
    return (output, final_cell, final_hidden), gradients


@pytest.mark.parametrize("cell_clip, proj_clip", [(None, None), (0.5, None), (None, 0.3), (0.5, 0.3)])
def test_hand_written_backward_matches_autograd(cell_clip, proj_clip):
    layer = random_layer(cell_clip, proj_clip)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]], dtype=torch.bool)  # (batch, words)
    inputs = torch.randn(2, 3, 5, 6, dtype=torch.float64, requires_grad=True)  # (2, batch, words, input_dim)
    cell = torch.randn(2, 3, 5, dtype=torch.float64, requires_grad=True)
    hidden = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    expected_values, expected_gradients = outputs_and_gradients(layer.forward, layer, inputs, mask, cell, hidden)
    values, gradients = outputs_and_gradients(layer.forward_for_training, layer, inputs, mask, cell, hidden)
    if proj_clip is not None:
        assert (expected_values[0].abs() == proj_clip).any()  # the clip's gradient rule is exercised
    for value, expected in zip(values, expected_values):
        torch.testing.assert_close(value, expected, rtol=0, atol=1e-14)
    for gradient, expected in zip(gradients, expected_gradients):
        torch.testing.assert_close(gradient, expected, rtol=0, atol=1e-13)


def test_autograd_runs_the_hand_written_backward():
    """ElmoBiLstm picks the kernel exactly when a gradient is recorded, and the readable forward otherwise."""
    encoder = ElmoBiLstm(ElmoConfig(lstm_dim=8, projection_dim=4, num_lstm_layers=1))
    torch.manual_seed(0)
    for parameter in encoder.parameters():  # the module alone is not initialised (ElmoPreTrainedModel does that)
        torch.nn.init.normal_(parameter, 0.0, 0.5)
    inputs = torch.randn(2, 3, 4, requires_grad=True)
    mask = torch.ones(2, 3, dtype=torch.bool)
    outputs, _ = encoder(inputs, mask)
    graph_nodes, pending = set(), [outputs[0].grad_fn]
    while pending:
        node = pending.pop()
        if node is not None and node not in graph_nodes:
            graph_nodes.add(node)
            pending.extend(next_node for next_node, _ in node.next_functions)
    assert any(type(node).__name__ == "_LstmRecurrenceBackward" for node in graph_nodes)
    with torch.no_grad():
        expected, _ = encoder(inputs, mask)
    torch.testing.assert_close(outputs[0], expected[0], rtol=0, atol=1e-6)
