"""ELMo's biLSTM step on a GPU with its elementwise work fused: the same math as `ElmoBiLstmLayer.forward`.

The reference step launches about fifteen kernels per step and layer (the gates' product, three sigmoids, two
tanhs, products and sums, two clips, three masked selects, the projection). On a GPU each is a few microseconds of
fixed cost against a few hundred kilobytes of work, so at batch 32 they take more of the GPU's time than the two
products. Here a step is four kernels, both directions at once:

1. `gates = x_t W + b + h_{t-1} U` (cuBLAS, as in the reference);
2. `cell_step_kernel`: the cell `c_t` and the memory `m_t` of `lstm_cell_step`, with the cell clip, and `c_t`
   written only for the rows still running (padding keeps its state);
3. `m_t P` (cuBLAS) as `projection_splits` products over slices of the cell's columns: one product with few rows
   and a long inner dimension runs at a small fraction of the GPU's rate, several shorter ones in one batched product
   much faster;
4. `hidden_step_kernel`: the sum of those shares, the projection clip, `h_t` kept for the running rows, and the
   output (0 at padding) written into the layer's output.

Fewer launches make the graphs of the fused step faster than those of the reference step, most for single
sentences; benchmarks/RESULTS.md ("Inference on a GPU") gives the figures and their command.

The kernels are written in Triton, which comes with PyTorch's CUDA wheels (`triton_lstm_kernels.py`, imported at
the first use of the fused step); they compute in float32 whatever the
storage dtype (float32, bfloat16 or float16). `cuda_graphs.py` runs them inside its graphs when `fused_step_apply`
says so; everything else runs the reference step. `tests/model/test_cuda_kernels.py` compares them with the reference
through Triton's interpreter on the CPU (`TRITON_INTERPRET=1`), and `tests/model/test_cuda.py` on a GPU.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, cast

import torch

if TYPE_CHECKING:
    from .modeling_elmo import ElmoBiLstm, ElmoBiLstmLayer

# Storage dtypes the kernels take (they compute in float32, so float64 keeps the reference step and its precision).
FUSED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def fused_step_apply(encoder: ElmoBiLstm, inputs: torch.Tensor) -> bool:
    """Whether `ElmoBiLstm` `encoder` can run its steps with the fused kernels on `inputs`: Triton is installed, the
    input is on a CUDA device (or Triton interprets on the CPU), its dtype is one of `FUSED_DTYPES`, the weights have
    that dtype, and autocast is off (its casts would change the dtypes the kernels see)."""
    on_device = inputs.is_cuda or (inputs.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1")
    return (
        on_device
        and inputs.dtype in FUSED_DTYPES
        and not torch.is_autocast_enabled(inputs.device.type)
        and all(parameter.dtype == inputs.dtype for parameter in encoder.parameters())
        and triton_kernels() is not None
    )


def triton_kernels() -> tuple[Any, Any] | None:
    """The Triton kernels `(cell_step_kernel, hidden_step_kernel)` of `triton_lstm_kernels.py`, imported at the
    first use of the fused step, so that only a CUDA path imports Triton; None without Triton."""
    try:
        from .triton_lstm_kernels import cell_step_kernel, hidden_step_kernel
    except ImportError:  # no Triton: the kernels are not defined
        return None
    return cell_step_kernel, hidden_step_kernel


def fused_layer_forward(
    layer: ElmoBiLstmLayer, inputs: torch.Tensor, mask: torch.Tensor, cell: torch.Tensor, hidden: torch.Tensor
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    r"""
    `layer(inputs, mask, cell, hidden)` for an `ElmoBiLstmLayer`, with each step's elementwise work in two kernels.

    Args:
        layer (`ElmoBiLstmLayer`): supplies the weights and clips.
        inputs (`(2, batch, words, input_dim)`): each direction's input, in the order it reads the words.
        mask (`(batch, words)` bool): real words, right-padded.
        cell (`(2, batch, lstm_dim)`), hidden (`(2, batch, projection_dim)`): the state before the first word.

    Returns:
        as `ElmoBiLstmLayer.forward`: outputs `(2, batch, words, projection_dim)`, 0 at padded positions, and the
        state `(cell, hidden)` after each row's last word (new tensors).
    """
    cell_step_kernel, hidden_step_kernel = cast("tuple[Any, Any]", triton_kernels())  # fused_step_apply checked it
    batch, words = mask.shape
    gate_inputs = layer.input_gates(inputs.flatten(1, 2)).view(2, batch, words, -1)  # (2, batch, words, 4 * lstm)
    cell, hidden = cell.contiguous().clone(), hidden.contiguous().clone()  # updated in place, step by step
    outputs = hidden.new_empty(2, batch, words, hidden.shape[-1])  # (2, batch, words, projection_dim)
    running = mask.t().to(torch.uint8).contiguous()  # (words, batch): 1 where the row has a word at the step
    lstm_dim, projection_dim = cell.shape[-1], hidden.shape[-1]
    cell_block, projection_block = _block(lstm_dim), _block(projection_dim)
    cell_grid = (2 * batch, -(-lstm_dim // cell_block))
    projection_grid = (2 * batch, -(-projection_dim // projection_block))
    # m_t P as `splits` products over slices of the cell's columns, added up by the hidden kernel: at few rows the one
    # product runs at a few percent of the GPU.
    splits = projection_splits(lstm_dim, cell.dtype)
    split_width = lstm_dim // splits
    memory = cell.new_empty(2 * splits, batch, split_width)  # m_t, split by cell columns
    # The layer registers its weights by name (`ElmoBiLstmLayer.WEIGHTS`), which the type checker cannot see.
    recurrent_weight, projection_weight = (
        cast(torch.Tensor, layer.recurrent_weight),
        cast(torch.Tensor, layer.projection_weight),
    )
    split_weight = projection_weight.reshape(2 * splits, split_width, projection_dim)
    for step in range(words):
        gates = torch.baddbmm(gate_inputs[:, :, step], hidden, recurrent_weight)  # (2, batch, 4 * lstm_dim)
        cell_step_kernel[cell_grid](
            gates,
            cell,
            memory,
            running[step],
            batch,
            lstm_dim,
            split_width,
            0.0 if layer.cell_clip is None else layer.cell_clip,
            HAS_CLIP=layer.cell_clip is not None,
            SPLITS=splits,
            BLOCK=cell_block,
        )
        projected = torch.bmm(memory, split_weight)  # (2 * splits, batch, projection_dim): each slice's share
        hidden_step_kernel[projection_grid](
            projected,
            hidden,
            outputs[:, :, step],
            outputs.stride(1),
            running[step],
            batch,
            projection_dim,
            0.0 if layer.proj_clip is None else layer.proj_clip,
            HAS_CLIP=layer.proj_clip is not None,
            SPLITS=splits,
            BLOCK=projection_block,
        )
    return outputs, (cell, hidden)


def projection_splits(lstm_dim: int, dtype: torch.dtype) -> int:
    """Slices of the cell's columns the projection is split into: up to 16, each at least 64 columns wide, in
    float32 only (in bfloat16 each partial sum would be rounded)."""
    if dtype != torch.float32:
        return 1
    return next(
        splits for splits in (16, 8, 4, 2, 1) if lstm_dim % splits == 0 and lstm_dim // splits >= 64 or splits == 1
    )


def _block(width: int) -> int:
    """Columns per program: the row's width up to 1024, a power of two (Triton's blocks are)."""
    return min(1024, 1 << max(width - 1, 0).bit_length())
