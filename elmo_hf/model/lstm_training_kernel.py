"""ELMo's biLSTM for training: packed steps with a shrinking batch and a hand-written backward.

`ElmoBiLstm.forward` (modeling_elmo.py) is the readable definition; under autograd it records about twenty nodes per
word and steps every padded position. `bilstm_training_forward` computes the same values on the packed layout of
`packed_steps.py` (rows sorted longest first, each step holding only the rows still running, so padding costs
nothing), and each layer (its input product and its recurrence) is one autograd node, `_PackedLstmRecurrence`,
whose backward:

- walks the steps in reverse with two small products per step (into the previous hidden state and into the cell
  output) and six elementwise operations, with the factors that do not depend on the carried gradient (the gate
  derivatives, the clip masks, tanh of the cell) computed once for all steps beforehand;
- computes the gradients of the recurrent weight `U` and the projection `P` once, as two large products over every
  packed position, where autograd does one small product per step, and those of the input, `W` and `b` as
  autograd would.

It is the same arithmetic: the outputs differ from the reference only by rounding, the gradients only by summation
order (`tests/model/test_lstm_training_kernel.py` compares both in float64). `ElmoBiLstm.forward` uses it whenever a
gradient is recorded (`config.lstm_implementation` "auto" or "packed"); `benchmarks/benchmark_training.py` measures
it (benchmarks/RESULTS.md, "Training the biLM on a CPU").
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from .packed_steps import PackedSteps

if TYPE_CHECKING:
    from .modeling_elmo import ElmoBiLstm


class _BufferPool:
    r"""
    CPU scratch buffers kept from one call to the next.

    PyTorch's CPU allocator hands blocks of tens of MB back to the system when they are freed, so a fresh one costs a
    page fault per 4 KB the first time it is written: for the recurrence's buffers, written a step at a time, that
    took longer than the steps' own arithmetic. A buffer is taken in a forward or backward and given back once the
    backward is done with it; a graph freed without a backward drops its buffers with it. Other devices allocate
    as usual (CUDA's allocator caches already).
    """

    def __init__(self, max_buffers: int = 16) -> None:
        self.free: list[torch.Tensor] = []
        self.max_buffers = max_buffers
        self.lock = threading.Lock()

    def take(self, shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        """An uninitialised tensor of `shape` with `like`'s dtype and device."""
        if like.device.type != "cpu":
            return like.new_empty(shape)
        size = math.prod(shape)
        with self.lock:
            fitting = [
                index for index, buffer in enumerate(self.free) if buffer.dtype == like.dtype and buffer.numel() >= size
            ]
            if fitting:
                buffer = self.free.pop(min(fitting, key=lambda index: self.free[index].numel()))
                return buffer[:size].view(shape)
        # Room for somewhat longer batches, so that the next ones reuse it.
        return like.new_empty(size + size // 4)[:size].view(shape)

    def give_back(self, *tensors: torch.Tensor | None) -> None:
        """Returns tensors from `take` (or None) to the pool: nothing may use them afterwards."""
        with self.lock:
            for tensor in tensors:
                if tensor is not None and tensor.device.type == "cpu":
                    self.free.append(tensor if tensor._base is None else tensor._base)
            self.free.sort(key=torch.Tensor.numel, reverse=True)
            del self.free[self.max_buffers :]


_POOL = _BufferPool()


class _Lease:
    """Gives `tensors` back to the pool when it is freed: kept on an autograd node's context, whose saved tensors they
    are, it outlives every backward through that node (a second one, with `retain_graph=True`, included)."""

    def __init__(self, *tensors: torch.Tensor | None) -> None:
        self.pool, self.tensors = _POOL, tensors

    def __del__(self) -> None:
        if not sys.is_finalizing():  # at interpreter exit there is nothing left to reuse them
            self.pool.give_back(*self.tensors)


def bilstm_training_forward(
    encoder: ElmoBiLstm,
    inputs: torch.Tensor,
    mask: torch.Tensor,
    cells: torch.Tensor,
    hiddens: torch.Tensor,
    dropout: float = 0.0,
    zero_state: bool = False,
    steps: Any = None,
    checkpoint: Callable[..., Any] | None = None,
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    r"""
    `ElmoBiLstm.forward`'s values on packed steps, with each layer's recurrence as one autograd node.

    Args:
        encoder (`ElmoBiLstm`): supplies the layers and the skip connections.
        inputs (`(batch, words, projection_dim)`): the token representation of each word.
        mask (`(batch, words)` bool): real words, right-padded.
        cells (`(layers, 2, batch, lstm_dim)`), hiddens (`(layers, 2, batch, projection_dim)`): each layer's initial
            state (`ElmoBiLstm.initial_states`).
        dropout (float): dropout probability on every layer's input (the residual adds the dropped input).
        zero_state (bool): the initial states are all zeros, so the first step has no recurrent term.
        steps (optional): the layout's tables; `PackedSteps` of the mask when None (`captured_training.PaddedSteps`
            runs every row through every step, with static shapes).
        checkpoint (callable, optional): gradient checkpointing's `checkpoint(function, *args)` (transformers'
            `_gradient_checkpointing_func`): each layer's recurrence then keeps only its input and initial state for
            the backward and runs again there, on buffers of its own (the pool's outlive a graph's saved tensors).

    Returns:
        each layer's output `(batch, words, 2 * projection_dim)`, `[forward; backward]`, 0 at padded positions, and
        the final cells `(layers, 2, batch, lstm_dim)` and hiddens `(layers, 2, batch, projection_dim)`.
    """
    if steps is None:
        steps = PackedSteps(mask.sum(dim=1), mask.shape[1])
    layer_input = steps.pack(inputs)  # (2, valid, projection_dim): both directions' words, step by step
    layer_outputs, final_cells, final_hiddens = [], [], []
    for index, layer in enumerate(encoder.layers):
        if dropout:
            layer_input = F.dropout(layer_input, dropout, training=True)
        initial_cell, initial_hidden = cells[index], hiddens[index]  # (2, batch, dim), the batch's row order
        arguments = (
            layer_input,
            layer.input_weight,
            layer.bias,
            layer.recurrent_weight,
            layer.projection_weight,
            initial_cell[:, steps.order],
            initial_hidden[:, steps.order],
            steps,
            layer.cell_clip,
            layer.proj_clip,
            zero_state,
        )
        if checkpoint is None:
            output, cell_states = _PackedLstmRecurrence.apply(*arguments, True)
        else:
            output, cell_states = checkpoint(_PackedLstmRecurrence.apply, *arguments, False)
        final_cells.append(steps.final_states(cell_states, initial_cell))
        final_hiddens.append(steps.final_states(output, initial_hidden))
        if encoder.use_skip_connections and index > 0:
            output = output + layer_input
        layer_outputs.append(steps.unpack(output))  # (batch, words, 2 * projection_dim)
        layer_input = output
    return layer_outputs, torch.stack(final_cells), torch.stack(final_hiddens)


class _PackedLstmRecurrence(torch.autograd.Function):
    r"""
    One `ElmoBiLstmLayer` on packed steps (`PackedSteps`), both directions at once: its input product and its
    recurrence.

    Inputs: the layer's input `(2, valid, input_dim)` (packed), the weights `W` `(2, input_dim, 4 * lstm_dim)`, `b`
    `(2, 4 * lstm_dim)`, `U` `(2, projection_dim, 4 * lstm_dim)` and `P` `(2, lstm_dim, projection_dim)`, the initial
    cell `(2, batch, lstm_dim)` and hidden `(2, batch, projection_dim)` in `steps.order`, the `PackedSteps`, the
    clips, whether the initial state is all zeros, and whether the forward's saved tensors may live in the pool.

    Outputs: the hidden state after each packed position `(2, valid, projection_dim)` (the layer's output, clipped)
    and the cell state `(2, valid, lstm_dim)` (clipped).

    The gate inputs `x W + b` and their gradients (the largest tensors of a layer, `(2, valid, 4 * lstm_dim)`) live in
    the pool's warm buffers: computed by autograd's `baddbmm`, each was a fresh allocation written in full twice (the
    broadcast bias, then the product), and its gradient another. Under gradient checkpointing (`pooled` False) the
    forward allocates its own: the pool's buffers go back only when the node is freed, which would keep what the
    checkpoint drops, and a recomputed forward's would return to the pool while its backward still reads them.
    """

    @staticmethod
    def forward(
        ctx: Any,
        layer_input: torch.Tensor,
        input_weight: torch.Tensor,
        bias: torch.Tensor,
        recurrent_weight: torch.Tensor,
        projection_weight: torch.Tensor,
        initial_cell: torch.Tensor,
        initial_hidden: torch.Tensor,
        steps: Any,
        cell_clip: float | None,
        proj_clip: float | None,
        zero_state: bool,
        pooled: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        _, valid, _ = layer_input.shape
        take = _POOL.take if pooled else lambda shape, like: like.new_empty(shape)
        four_lstm_dim = input_weight.shape[-1]
        lstm_dim = four_lstm_dim // 4
        # Each step is `modeling_elmo.lstm_cell_step` (the one definition of the cell), fused in place: written as a
        # call to it, the forward would allocate its results at every step and its activations would have to be
        # recomputed for the backward (benchmarks/benchmark_training.py measures the recurrence).
        # tests/model/test_lstm_training_kernel.py holds this forward and its backward to autograd through that
        # function.
        # Kept for the backward: the gate activations sigmoid(i), sigmoid(f), tanh(g), sigmoid(o) side by side,
        # written over the gate inputs; the cell before and after its clip; the projection before and after its clip
        # (the output).
        # tanh(x) = 2 sigmoid(2 x) - 1 throughout: PyTorch's CPU tanh is several times slower than its sigmoid. With
        # the candidate's pre-activation doubled (its columns of W, b and U, in copies), one sigmoid covers the four
        # gates.
        candidate = slice(2 * lstm_dim, 3 * lstm_dim)
        doubled_input_weight, doubled_bias, doubled_recurrent_weight = (
            input_weight.clone(),
            bias.unsqueeze(1).clone(),  # (2, 1, 4 * lstm_dim)
            recurrent_weight.clone(),
        )
        for weight in (doubled_input_weight, doubled_bias, doubled_recurrent_weight):
            weight[..., candidate] *= 2
        # The input's share of every step's gates, x W (the bias joins each step's slice while it is in cache).
        activations = torch.bmm(layer_input, doubled_input_weight, out=take((2, valid, four_lstm_dim), bias))
        cells = initial_cell.new_empty(2, valid, lstm_dim)
        unclipped_cells = cells if cell_clip is None else take((2, valid, lstm_dim), cells)
        cell_tanhs = take(cells.shape, cells)  # tanh(clipped cell), for the backward
        outputs = initial_hidden.new_empty(2, valid, initial_hidden.shape[-1])
        projected = outputs if proj_clip is None else take(outputs.shape, outputs)
        cell, hidden, start = initial_cell, initial_hidden, 0
        memory_buffer = cells.new_empty(2, initial_cell.shape[1], lstm_dim)  # reused by every step
        for active in steps.batch_sizes:
            rows = slice(start, start + active)
            gates = activations[:, rows]  # (2, active, 4 * lstm_dim)
            gates.add_(doubled_bias)  # x W + b, rounded as autograd's baddbmm(b, x, W) rounds it
            if start or not zero_state:  # (from a zero state, hidden @ U is exactly 0)
                gates.baddbmm_(hidden[:, :active], doubled_recurrent_weight)
            gates.sigmoid_()  # input, forget and output gates
            gates[..., candidate].mul_(2).sub_(1)  # cell candidate: tanh
            input_act, forget_act, candidate_act, output_act = gates.chunk(4, dim=-1)
            new_cell = torch.mul(forget_act, cell[:, :active], out=unclipped_cells[:, rows])
            new_cell.addcmul_(input_act, candidate_act)  # (2, active, lstm_dim)
            if cell_clip is not None:
                new_cell = torch.clamp(new_cell, -cell_clip, cell_clip, out=cells[:, rows])
            cell_tanh = torch.mul(new_cell, 2.0, out=cell_tanhs[:, rows]).sigmoid_().mul_(2).sub_(1)  # tanh, as above
            memory = torch.mul(output_act, cell_tanh, out=memory_buffer[:, :active])  # (2, active, lstm_dim)
            new_hidden = torch.bmm(memory, projection_weight, out=projected[:, rows])  # (2, active, projection_dim)
            if proj_clip is not None:
                new_hidden = torch.clamp(new_hidden, -proj_clip, proj_clip, out=outputs[:, rows])
            # The next step's rows are a prefix of these: it reads its state from here.
            cell, hidden, start = new_cell, new_hidden, start + active
        ctx.steps, ctx.clips = steps, (cell_clip, proj_clip)
        ctx.lease = None
        if pooled:
            ctx.lease = _Lease(
                activations,
                cell_tanhs,
                None if cell_clip is None else unclipped_cells,
                None if proj_clip is None else projected,
            )
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(
            layer_input,
            input_weight,
            recurrent_weight,
            projection_weight,
            activations,
            unclipped_cells,
            cells,
            cell_tanhs,
            projected,
            outputs,
            initial_cell,
            initial_hidden,
        )
        return outputs, cells

    @staticmethod
    def backward(ctx: Any, outputs_grad: torch.Tensor, cells_grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (
            layer_input,
            input_weight,
            recurrent_weight,
            projection_weight,
            activations,
            unclipped_cells,
            cells,
            cell_tanh,
            projected,
            outputs,
            initial_cell,
            initial_hidden,
        ) = ctx.saved_tensors
        steps, (cell_clip, proj_clip) = ctx.steps, ctx.clips
        _, valid, four_lstm_dim = activations.shape
        lstm_dim = four_lstm_dim // 4
        input_act, forget_act, candidate_act, output_act = activations.chunk(4, dim=-1)  # each (2, valid, lstm_dim)
        cell_shape = cells.shape  # (2, valid, lstm_dim)
        previous_cells = torch.index_select(
            torch.cat([cells, initial_cell], dim=1), 1, steps.previous_index, out=_POOL.take(cell_shape, cells)
        )

        # Every factor that does not depend on the gradient carried back from later steps, for all steps at once, in
        # as few passes over memory as the products allow (each pass over these tensors costs more than a step).
        # The clips pass the gradient inside and on their bounds (torch.clamp's rule).
        hidden_mask = None if proj_clip is None else _inside_clip(projected, proj_clip)
        cell_mask = None if cell_clip is None else _inside_clip(unclipped_cells, cell_clip)
        memories = torch.mul(output_act, cell_tanh, out=_POOL.take(cell_shape, cells))  # the projection's input
        # d memory / d cell = o (1 - tanh(c)^2) = o - memory tanh(c)
        memory_to_cell = torch.addcmul(output_act, memories, cell_tanh, value=-1, out=_POOL.take(cell_shape, cells))
        # d(new cell) / d(pre-activation) of i, f, g and d memory / d(pre-activation) of o, side by side:
        # sigmoid' = s (1 - s) = s - s^2, tanh' = 1 - t^2.
        gate_factors = _POOL.take(activations.shape, activations)
        input_factor, forget_factor, candidate_factor, output_factor = gate_factors.chunk(4, dim=-1)
        torch.addcmul(input_act, input_act, input_act, value=-1, out=input_factor).mul_(candidate_act)
        torch.addcmul(forget_act, forget_act, forget_act, value=-1, out=forget_factor).mul_(previous_cells)
        torch.mul(candidate_act, candidate_act, out=candidate_factor)
        torch.addcmul(input_act, input_act, candidate_factor, value=-1, out=candidate_factor)
        torch.addcmul(output_act, output_act, output_act, value=-1, out=output_factor).mul_(cell_tanh)

        # The gradient of each projection (the output before its clip), completed step by step with the recurrence's.
        projected_grads = _POOL.take(outputs.shape, outputs)
        if outputs_grad is None:
            projected_grads.zero_()
        else:
            projected_grads.copy_(outputs_grad)
        if hidden_mask is not None:
            projected_grads.mul_(hidden_mask)
        # Each step turns its factors into its gate gradients in place: gate_factors becomes the gradient of the gate
        # pre-activations, (2, valid, 4 * lstm_dim).
        gate_grads = gate_factors
        ifg_grads = gate_grads.view(2, valid, 4, lstm_dim)[:, :, :3]  # the input, forget and candidate gates
        # The gradient reaching the state before the current step, from this step's products; rows past a step's
        # batch stay 0 (rows end, longest last, so a row joins the walk back at its own last step).
        hidden_carry = torch.zeros_like(initial_hidden)  # (2, batch, projection_dim)
        cell_carry = torch.zeros_like(initial_cell)  # (2, batch, lstm_dim)
        recurrent_weight_t = recurrent_weight.transpose(1, 2).contiguous()  # (2, 4 * lstm_dim, projection_dim)
        projection_weight_t = projection_weight.transpose(1, 2).contiguous()  # (2, projection_dim, lstm_dim)
        start = valid
        for active in reversed(steps.batch_sizes):
            start -= active
            rows = slice(start, start + active)
            hidden_grad = projected_grads[:, rows]  # (2, active, projection_dim), a view filled in place
            if hidden_mask is None:
                hidden_grad.add_(hidden_carry[:, :active])
            else:
                hidden_grad.addcmul_(hidden_carry[:, :active], hidden_mask[:, rows])
            memory_grad = torch.bmm(hidden_grad, projection_weight_t)  # (2, active, lstm_dim)
            cell_grad = cell_carry[:, :active] if cells_grad is None else cell_carry[:, :active] + cells_grad[:, rows]
            cell_grad = torch.addcmul(cell_grad, memory_grad, memory_to_cell[:, rows])  # of the clipped cell
            if cell_mask is not None:
                cell_grad.mul_(cell_mask[:, rows])  # of the cell before its clip
            ifg_grads[:, rows].mul_(cell_grad.unsqueeze(2))
            output_factor[:, rows].mul_(memory_grad)
            if start == 0 and not any(ctx.needs_input_grad[5:7]):
                break  # the initial state (zeros, or given without a gradient) needs none
            torch.bmm(gate_grads[:, rows], recurrent_weight_t, out=hidden_carry[:, :active])
            torch.mul(cell_grad, forget_act[:, rows], out=cell_carry[:, :active])

        # The weight gradients, each one product over every packed position, and the input's.
        previous_hiddens = torch.index_select(
            torch.cat([outputs, initial_hidden], dim=1), 1, steps.previous_index, out=_POOL.take(outputs.shape, outputs)
        )
        recurrent_weight_grad = torch.bmm(previous_hiddens.transpose(1, 2), gate_grads)
        projection_weight_grad = torch.bmm(memories.transpose(1, 2), projected_grads)
        input_needs, input_weight_needs, bias_needs = ctx.needs_input_grad[:3]
        input_grad = torch.bmm(gate_grads, input_weight.transpose(1, 2)) if input_needs else None
        input_weight_grad = torch.bmm(layer_input.transpose(1, 2), gate_grads) if input_weight_needs else None
        bias_grad = gate_grads.sum(dim=1) if bias_needs else None
        _POOL.give_back(
            previous_cells,
            memories,
            memory_to_cell,
            projected_grads,
            previous_hiddens,
            hidden_mask,
            cell_mask,
            gate_grads,
        )
        return (
            input_grad,
            input_weight_grad,
            bias_grad,
            recurrent_weight_grad,
            projection_weight_grad,
            cell_carry if ctx.needs_input_grad[5] else None,
            hidden_carry if ctx.needs_input_grad[6] else None,
            None,
            None,
            None,
            None,
            None,
        )


def _inside_clip(values: torch.Tensor, clip: float) -> torch.Tensor:
    """`(|values| <= clip)` as 1.0 / 0.0 in `values`' dtype, in a pooled buffer."""
    return torch.abs(values, out=_POOL.take(values.shape, values)).le_(clip)
