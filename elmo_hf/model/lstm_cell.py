"""The LSTM cell's step, its one definition.

`modeling_elmo.py`'s `ElmoBiLstmLayer` and `cpu_kernels.py`'s packed steps call `lstm_cell_step`; the training
kernel (`lstm_training_kernel.py`) and the fused CUDA step (`cuda_kernels.py`) compute it fused in place and are
tested against it. This module imports nothing of the package, so every path can import it and none of them needs
the model file.
"""

import torch


def lstm_cell_step(
    gates: torch.Tensor, cell: torch.Tensor, cell_clip: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""
    One step of the LSTM cell:

        c_t = clip(sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g), cell_clip),    m_t = sigmoid(o) * tanh(c_t)

    Args:
        gates (`(..., 4 * lstm_dim)`): the gate pre-activations `x_t W + h_{t-1} U + b` in the order i, f, g, o.
        cell (`(..., lstm_dim)`): the cell before the step.
        cell_clip (float or None): clip of the cell.

    Returns:
        the new cell `(..., lstm_dim)` and the memory `m_t` `(..., lstm_dim)`, which the projection `P` turns into
        the hidden state.
    """
    input_gate, forget_gate, cell_candidate, output_gate = gates.chunk(4, dim=-1)
    new_cell = clip(
        torch.sigmoid(forget_gate) * cell + torch.sigmoid(input_gate) * torch.tanh(cell_candidate), cell_clip
    )
    return new_cell, torch.sigmoid(output_gate) * torch.tanh(new_cell)


def clip(values: torch.Tensor, bound: float | None) -> torch.Tensor:
    """`values` clamped to `[-bound, bound]`; unchanged when `bound` is None."""
    return values if bound is None else values.clamp(-bound, bound)
