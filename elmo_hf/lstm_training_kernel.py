"""ELMo's LSTM layer with a hand-written backward pass, for training.

`ElmoBiLstmLayer.forward` (modeling_elmo.py) is the readable definition. Under autograd it records about twenty
nodes per word, and its backward computes the recurrent and projection weight gradients one small product per word.
`lstm_layer_function` computes the same forward, keeps only the activations the backward needs, and in the backward:

- walks the words in reverse with two small products per word (into the previous hidden state and into the cell
  output), with no autograd bookkeeping;
- computes the gradients of the recurrent weight `U` and the projection `P` once, as two large products over every
  word of every row, where autograd does one small product per word.

It is the same arithmetic: the outputs differ from the reference only by the rounding of the input product (taken
here over word-major rows), the gradients only by summation order (`tests/test_lstm_training_kernel.py` compares
both in float64). `ElmoBiLstm.forward` uses it whenever a gradient is needed; `benchmarks/benchmark_training.py`
measures it.
"""

import torch


def lstm_layer_function(layer, gate_inputs, mask, cell, hidden):
    r"""
    The `ElmoBiLstmLayer` recurrence with a hand-written backward.

    Args:
        layer (`ElmoBiLstmLayer`): gives `recurrent_weight` `(2, projection_dim, 4 * lstm_dim)`, `projection_weight`
            `(2, lstm_dim, projection_dim)` and the clips.
        gate_inputs (`(2, words, batch, 4 * lstm_dim)`, word-major): each direction's `x W + b`
            (`layer.input_gates`).
        mask (`(batch, words)` bool): real words, right-padded.
        cell (`(2, batch, lstm_dim)`), hidden (`(2, batch, projection_dim)`): the state before the first word.

    Returns:
        outputs `(2, words, batch, projection_dim)` (word-major), 0 at padded positions, and the state `(cell,
        hidden)` after each row's last word: the values of `ElmoBiLstmLayer.forward`.
    """
    return _LstmRecurrence.apply(
        gate_inputs, layer.recurrent_weight, layer.projection_weight, mask, cell, hidden, layer.cell_clip,
        layer.proj_clip,
    )  # fmt: skip


class _LstmRecurrence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate_inputs, recurrent_weight, projection_weight, mask, cell, hidden, cell_clip, proj_clip):
        _, words, batch, four_lstm_dim = gate_inputs.shape
        lstm_dim = four_lstm_dim // 4
        running_steps = mask.t().reshape(words, 1, batch, 1)  # (words, 1, batch, 1)
        # Everything is word-major, (2, words, batch, dim): step t is `[:, t]`, each direction's rows contiguous, a
        # layout the batched products read and write without copies. Kept for the backward, step by step: the gate
        # activations sigmoid(i), sigmoid(f), tanh(g), sigmoid(o) side by side, the cell and hidden state before the
        # step, the new cell before its clip, the cell output `memory` (the projection's input) and the new hidden
        # state before its clip.
        activations = torch.empty_like(gate_inputs)
        cells_before, new_cells, memories = (cell.new_empty(2, words, batch, lstm_dim) for _ in range(3))
        hiddens_before, projected, outputs = (hidden.new_empty(2, words, batch, hidden.shape[-1]) for _ in range(3))
        for step, running in enumerate(running_steps):
            cells_before[:, step] = cell
            hiddens_before[:, step] = hidden
            gates = torch.baddbmm(gate_inputs[:, step], hidden, recurrent_weight, out=activations[:, step])
            gates[..., : 2 * lstm_dim].sigmoid_()  # input and forget gates
            gates[..., 2 * lstm_dim : 3 * lstm_dim].tanh_()  # cell candidate
            gates[..., 3 * lstm_dim :].sigmoid_()  # output gate
            input_act, forget_act, candidate_act, output_act = gates.chunk(4, dim=-1)
            new_cell = torch.add(forget_act * cell, input_act * candidate_act, out=new_cells[:, step])
            if cell_clip is not None:
                new_cell = new_cell.clamp(-cell_clip, cell_clip)
            memory = torch.mul(output_act, torch.tanh(new_cell), out=memories[:, step])  # (2, batch, lstm_dim)
            new_hidden = torch.bmm(memory, projection_weight, out=projected[:, step])  # (2, batch, projection_dim)
            if proj_clip is not None:
                new_hidden = new_hidden.clamp(-proj_clip, proj_clip)
            cell = torch.where(running, new_cell, cell)
            hidden = torch.where(running, new_hidden, hidden)
            torch.mul(new_hidden, running, out=outputs[:, step])  # 0 at padding
        ctx.clips = (cell_clip, proj_clip)
        ctx.save_for_backward(recurrent_weight, projection_weight, running_steps, activations, cells_before,
                              new_cells, memories, hiddens_before, projected)  # fmt: skip
        return outputs, cell, hidden  # outputs (2, words, batch, projection_dim)

    @staticmethod
    def backward(ctx, outputs_grad, final_cell_grad, final_hidden_grad):
        (recurrent_weight, projection_weight, running_steps, activations, cells_before, new_cells, memories,
         hiddens_before, projected) = ctx.saved_tensors  # fmt: skip
        cell_clip, proj_clip = ctx.clips
        _, words, batch, _ = activations.shape
        # The clips pass the gradient inside and on their bounds (torch.clamp's rule).
        cell_clip_masks = None if cell_clip is None else new_cells.abs() <= cell_clip
        hidden_clip_masks = None if proj_clip is None else projected.abs() <= proj_clip
        if cell_clip is not None:
            new_cells = new_cells.clamp(-cell_clip, cell_clip)  # (2, words, batch, lstm_dim), as the forward used
        recurrent_weight_t = recurrent_weight.transpose(1, 2).contiguous()  # (2, 4 * lstm_dim, projection_dim)
        projection_weight_t = projection_weight.transpose(1, 2).contiguous()  # (2, projection_dim, lstm_dim)
        # The gradient reaching the state after the current step (initially: after each row's last word).
        cell_grad = final_cell_grad if final_cell_grad is not None else cells_before.new_zeros(cells_before[:, 0].shape)
        hidden_grad = final_hidden_grad if final_hidden_grad is not None else projected.new_zeros(projected[:, 0].shape)
        gate_grads = torch.empty_like(activations)  # (2, words, batch, 4 * lstm_dim)
        projected_grads = torch.empty_like(projected)  # (2, words, batch, projection_dim)
        for step in range(words - 1, -1, -1):
            running = running_steps[step]  # (1, batch, 1)
            # Rows without a word at this step passed their state through unchanged: so does the gradient.
            new_hidden_grad = torch.mul(hidden_grad + outputs_grad[:, step], running, out=projected_grads[:, step])
            if hidden_clip_masks is not None:
                new_hidden_grad.mul_(hidden_clip_masks[:, step])  # the gradient of memory @ P
            memory_grad = torch.bmm(new_hidden_grad, projection_weight_t)  # (2, batch, lstm_dim)
            input_act, forget_act, candidate_act, output_act = activations[:, step].chunk(4, dim=-1)
            input_gate_grad, forget_gate_grad, candidate_grad, output_gate_grad = gate_grads[:, step].chunk(4, dim=-1)
            cell_tanh = torch.tanh(new_cells[:, step])
            # d memory / d cell = o (1 - tanh(c)^2)
            cell_total_grad = cell_grad * running + memory_grad * output_act * (1 - cell_tanh**2)
            if cell_clip_masks is not None:
                cell_total_grad.mul_(cell_clip_masks[:, step])
            # d/d(pre-activation) of each gate: sigmoid' = s (1 - s), tanh' = 1 - t^2.
            torch.mul(cell_total_grad * candidate_act, input_act * (1 - input_act), out=input_gate_grad)
            torch.mul(cell_total_grad * cells_before[:, step], forget_act * (1 - forget_act), out=forget_gate_grad)
            torch.mul(cell_total_grad * input_act, 1 - candidate_act**2, out=candidate_grad)
            torch.mul(memory_grad * cell_tanh, output_act * (1 - output_act), out=output_gate_grad)
            hidden_grad = torch.baddbmm(hidden_grad.masked_fill(running, 0.0), gate_grads[:, step], recurrent_weight_t)
            cell_grad = torch.addcmul(cell_grad.masked_fill(running, 0.0), cell_total_grad, forget_act)

        # The weight gradients, each one product over every (word, row) pair.
        def over_all_steps(values):  # (2, words, batch, dim) -> (2, words * batch, dim), a view
            return values.view(2, words * batch, -1)

        recurrent_weight_grad = torch.bmm(over_all_steps(hiddens_before).transpose(1, 2), over_all_steps(gate_grads))
        projection_weight_grad = torch.bmm(over_all_steps(memories).transpose(1, 2), over_all_steps(projected_grads))
        return (gate_grads, recurrent_weight_grad, projection_weight_grad, None, cell_grad, hidden_grad, None,
                None)  # fmt: skip
