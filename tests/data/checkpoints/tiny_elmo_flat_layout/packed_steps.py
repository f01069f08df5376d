"""The layout both fast LSTM paths run on: a batch's words packed step by step, with a shrinking batch.

Rows are sorted longest first, so the rows still running at step t are a prefix of the batch: step t holds
`batch_sizes[t]` rows, stored one after the other (time-major), and padding is never stored or computed. Both
directions share the layout; direction 1 reads each row's words backwards. `cpu_kernels.py` (inference) and
`lstm_training_kernel.py` (training) use it; `modeling_elmo.ElmoBiLstm.forward` is the same math on padded rows.
"""

import torch


class PackedSteps:
    r"""
    Index tables between a right-padded batch and its packed steps.

    Args:
        lengths (`(batch,)` int tensor): real words per row (0 allowed).
        words (int): the padded batch's width.

    Attributes:
        order (`(batch,)`): the batch's rows sorted longest first (stable); `restore` undoes it.
        batch_sizes (list of ints, one per step): rows still running at each step.
        valid (int): packed positions, the batch's real words.
        pack_index (`(2, valid)`): for each direction and packed position, its `row * words + word` in the padded
            batch (direction 1 reads the row's words backwards).
        unpack_index (`(2, batch * words)`): for each direction and padded position, its packed position, or
            `valid` (a zero row, see `unpack`) at padding.
        previous_index (`(valid,)`): where each packed position's previous state is: its row's position at the
            previous step, or at step 0 `valid + sorted row` (the initial state, in `order`, appended after the
            packed steps).
        last_index (`(batch,)`): the packed position of each row's last word, or `valid + row` for an empty row, in
            the batch's own row order.
    """

    def __init__(self, lengths, words):
        device = lengths.device
        batch = lengths.shape[0]
        self.order = torch.argsort(lengths, descending=True, stable=True)
        self.restore = torch.argsort(self.order)
        sorted_lengths = lengths[self.order]
        positions = torch.arange(words, device=device)
        running = positions.unsqueeze(1) < sorted_lengths.unsqueeze(0)  # (words, batch), sorted rows
        steps, rows = running.nonzero(as_tuple=True)  # (valid,) each, step by step: the packed order
        self.batch_sizes = [size for size in running.sum(dim=1).tolist() if size]
        self.valid = valid = steps.numel()
        self.words = words
        source_rows = self.order[rows] * words  # (valid,)
        self.pack_index = torch.stack([source_rows + steps, source_rows + sorted_lengths[rows] - 1 - steps])
        self.unpack_index = torch.full((2, batch * words), valid, dtype=torch.long, device=device)
        self.unpack_index.scatter_(1, self.pack_index, torch.arange(valid, device=device).expand(2, -1))
        packed_position = torch.full((words + 1, batch), -1, dtype=torch.long, device=device)
        packed_position[steps, rows] = torch.arange(valid, device=device)
        # Step 0 reads the initial state, stored after the packed steps in row order.
        packed_position[-1] = valid + torch.arange(batch, device=device)
        self.previous_index = packed_position[steps - 1, rows]  # steps - 1 = -1 reads the last row: the initial state
        last_sorted = packed_position[sorted_lengths - 1, torch.arange(batch, device=device)]  # (batch,) sorted rows
        self.last_index = last_sorted[self.restore]
        self.last_index = torch.where(lengths > 0, self.last_index, valid + torch.arange(batch, device=device))

    def pack(self, sequence):
        """A right-padded `(batch, words, *dims)` tensor -> each direction's packed steps `(2, valid, *dims)`."""
        flat = sequence.reshape(-1, *sequence.shape[2:])  # (batch * words, *dims)
        return flat[self.pack_index.flatten()].view(2, self.valid, *sequence.shape[2:])

    def unpack(self, packed):
        """Each direction's packed steps `(2, valid, dim)` -> `(batch, words, 2 * dim)`, `[forward; backward]` in
        word order, 0 at padding."""
        _, _, dim = packed.shape
        with_zero_row = torch.cat([packed, packed.new_zeros(2, 1, dim)], dim=1)  # (2, valid + 1, dim)
        both = [with_zero_row[direction].index_select(0, self.unpack_index[direction]) for direction in range(2)]
        return torch.cat(both, dim=-1).view(-1, self.words, 2 * dim)

    def final_states(self, packed_states, initial):
        """Each row's state after its last word: packed states `(2, valid, dim)` and the initial state `(2, batch,
        dim)` (the state of an empty row) -> `(2, batch, dim)` in the batch's row order."""
        return torch.cat([packed_states, initial], dim=1).index_select(1, self.last_index)
