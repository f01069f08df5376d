"""The training path (`elmo_hf/model/lstm_training_kernel.py`: packed steps, a hand-written backward) against autograd
through the readable `ElmoBiLstm.forward` (`implementation="reference"`), in float64: the same outputs and final
state, the same gradients for every input, initial state and weight, with and without clips, with rows of different
lengths, a one-word row and an empty row, with a gradient on the final state."""

import pytest
import torch
from helpers import tiny_model_and_batch

from elmo_hf import ElmoConfig
from elmo_hf.model.modeling_elmo import ElmoBiLstm
from elmo_hf.model.packed_steps import PackedSteps


def random_encoder(cell_clip, proj_clip, num_lstm_layers=2):
    config = ElmoConfig(
        lstm_dim=5, projection_dim=4, num_lstm_layers=num_lstm_layers, cell_clip=cell_clip, proj_clip=proj_clip
    )
    torch.manual_seed(0)
    encoder = ElmoBiLstm(config).double()
    for parameter in encoder.parameters():
        torch.nn.init.normal_(parameter, 0.0, 0.7)  # large enough that about a fifth of the outputs clip
    return encoder


def outputs_and_gradients(encoder, implementation, inputs, mask, states):
    outputs, (final_cell, final_hidden) = encoder(inputs, mask, states, implementation=implementation)
    generator = torch.Generator().manual_seed(1)
    values = (*outputs, final_cell, final_hidden)
    weights = [torch.randn(value.shape, dtype=torch.float64, generator=generator) for value in values]
    loss = sum((value * weight).sum() for value, weight in zip(values, weights))
    gradients = torch.autograd.grad(loss, [inputs, *states, *encoder.parameters()])
    return values, gradients


# Rows of 5, 3, 1 (one word), 0 (empty) and 4 words, unsorted.
LENGTHS = [5, 3, 1, 0, 4]


@pytest.mark.parametrize("cell_clip, proj_clip", [(None, None), (0.5, None), (None, 0.3), (0.5, 0.3)])
def test_hand_written_backward_matches_autograd(cell_clip, proj_clip):
    encoder = random_encoder(cell_clip, proj_clip)
    mask = torch.arange(5) < torch.tensor(LENGTHS).unsqueeze(1)  # (batch, words)
    inputs = torch.randn(5, 5, 4, dtype=torch.float64).masked_fill(~mask.unsqueeze(-1), 0.0).requires_grad_()
    states = (
        torch.randn(2, 2, 5, 5, dtype=torch.float64, requires_grad=True),
        torch.randn(2, 2, 5, 4, dtype=torch.float64, requires_grad=True),
    )
    expected_values, expected_gradients = outputs_and_gradients(encoder, "reference", inputs, mask, states)
    values, gradients = outputs_and_gradients(encoder, "packed", inputs, mask, states)
    if proj_clip is not None:
        assert (expected_values[0].abs() == proj_clip).any()  # the clip's gradient rule is exercised
    for value, expected in zip(values, expected_values):
        torch.testing.assert_close(value, expected, rtol=0, atol=1e-14)
    for gradient, expected in zip(gradients, expected_gradients):
        torch.testing.assert_close(gradient, expected, rtol=0, atol=1e-13)


def test_outputs_alone_and_float32():
    """Without a gradient on the final state (pretraining's case), and in float32 within rounding."""
    encoder = random_encoder(3.0, 3.0).float()
    mask = torch.arange(7) < torch.tensor([7, 2, 5, 1]).unsqueeze(1)
    inputs = torch.randn(4, 7, 4).masked_fill(~mask.unsqueeze(-1), 0.0).requires_grad_()
    results = {}
    for implementation in ("reference", "packed"):
        outputs, _ = encoder(inputs, mask, implementation=implementation)
        gradients = torch.autograd.grad(outputs[-1].sum(), [inputs, *encoder.parameters()])
        results[implementation] = [*outputs, *gradients]
    for packed, reference in zip(results["packed"], results["reference"]):
        torch.testing.assert_close(packed, reference, rtol=1e-5, atol=1e-6)


def test_packed_steps_tables():
    """The packed layout of rows of 2, 0, 3 words: rows sorted longest first, step by step, padding left out."""
    steps = PackedSteps(torch.tensor([2, 0, 3]), 3)
    assert steps.order.tolist() == [2, 0, 1] and steps.batch_sizes == [2, 2, 1] and steps.valid == 5
    sequence = torch.arange(9.0).view(3, 3, 1)  # row r, word w holds 3 r + w
    assert steps.pack(sequence).flatten(1).tolist() == [[6, 0, 7, 1, 8], [8, 1, 7, 0, 6]]
    unpacked = steps.unpack(steps.pack(sequence))  # (batch, words, 2): forward and backward read back in order
    assert unpacked[..., 0].tolist() == [[0, 1, 0], [0, 0, 0], [6, 7, 8]]
    assert torch.equal(unpacked[..., 0], unpacked[..., 1])
    initial = torch.tensor([[10.0], [11.0], [12.0]]).expand(2, -1, -1)  # (2, batch, 1)
    assert steps.final_states(steps.pack(sequence), initial)[0].flatten().tolist() == [1, 11, 8]


def test_autograd_runs_the_hand_written_backward():
    """The model runs the kernel exactly when a gradient is recorded (`lstm_paths.py`), the same outputs as the
    readable forward otherwise."""
    model, input_ids = tiny_model_and_batch(model_seed=3, batch_seed=3, batch=3, max_words=4)
    outputs = model(input_ids).last_hidden_state
    graph_nodes, pending = set(), [outputs.grad_fn]
    while pending:
        node = pending.pop()
        if node is not None and node not in graph_nodes:
            graph_nodes.add(node)
            pending.extend(next_node for next_node, _ in node.next_functions)
    assert any(type(node).__name__ == "_PackedLstmRecurrenceBackward" for node in graph_nodes)
    model.config.lstm_implementation = "reference"
    with torch.no_grad():
        expected = model(input_ids).last_hidden_state
    torch.testing.assert_close(outputs, expected, rtol=0, atol=1e-6)


def test_second_backward_and_reused_buffers():
    """A graph kept with retain_graph gives the same gradients twice, with other forwards and backwards in between
    reusing the kernel's scratch buffers."""
    encoder = random_encoder(0.5, 0.3)
    mask = torch.arange(6) < torch.tensor([6, 4, 1]).unsqueeze(1)
    inputs = torch.randn(3, 6, 4, dtype=torch.float64).requires_grad_()
    outputs, _ = encoder(inputs, mask, implementation="packed")
    first = torch.autograd.grad(outputs[-1].sum(), [inputs, *encoder.parameters()], retain_graph=True)
    for _ in range(2):  # other batches in between
        other, _ = encoder(torch.randn(3, 6, 4, dtype=torch.float64), mask, implementation="packed")
        other[-1].sum().backward()
    second = torch.autograd.grad(outputs[-1].sum(), [inputs, *encoder.parameters()])
    for again, expected in zip(second, first):
        torch.testing.assert_close(again, expected, rtol=0, atol=0)
