"""PyTorch ELMo: character CNN -> highway -> projection -> bidirectional LSTM language model.

The whole forward pass lives in this file. Weights converted from the original TensorFlow files use
PyTorch conventions (gate order i, f, g, o; no hidden forget bias; weights as `(out, in)`): every
TensorFlow quirk is undone once, in `conversion/convert_elmo_original_tf_to_hf.py`.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.utils import ModelOutput

from .configuration_elmo import ElmoConfig


@dataclass
class ElmoModelOutput(ModelOutput):
    r"""
    Outputs of [`ElmoModel`]. W counts the words of the input, sentence boundaries included.

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch, W, 2 * projection_dim)`):
            the top LSTM layer, `[forward; backward]`; 0 at padded positions.
        hidden_states (tuple of `num_lstm_layers + 1` `torch.FloatTensor`s of shape `(batch, W, 2 * projection_dim)`,
            returned when `output_hidden_states=True`): layer 0 is the context-independent token representation
            duplicated, `[x; x]`, then every LSTM layer; 0 at padded positions.
        lstm_states (tuple of two `torch.FloatTensor`s): the LSTM state after each row's last word,
            `cell` of shape `(num_lstm_layers, 2, batch, lstm_dim)` and `hidden` of shape
            `(num_lstm_layers, 2, batch, projection_dim)` (direction 0 is forward, 1 backward). Pass it as
            `lstm_states` to the next call to continue each row where it stopped, as bilm-tf does.
    """

    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    lstm_states: tuple[torch.FloatTensor, torch.FloatTensor] | None = None


class ElmoHighway(nn.Module):
    """One highway layer: `gate * relu(transform(x)) + (1 - gate) * x`, with `gate = sigmoid(gate(x))`."""

    def __init__(self, dim):
        super().__init__()
        self.transform = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, dim)

    def forward(self, x):
        gate = torch.sigmoid(self.gate(x))
        return gate * F.relu(self.transform(x)) + (1 - gate) * x


class ElmoCharacterEncoder(nn.Module):
    """Context-independent word representation from character ids: char CNN -> highway -> projection."""

    def __init__(self, config):
        super().__init__()
        self.char_embedding = nn.Embedding(config.num_characters, config.char_embedding_dim, padding_idx=0)
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.char_embedding_dim, count, kernel_size=width) for width, count in config.filters
        )
        self.activation = torch.relu if config.activation == "relu" else torch.tanh
        self.highways = nn.ModuleList(ElmoHighway(config.num_filters) for _ in range(config.num_highway_layers))
        # As in bilm-tf, the CNN output is only projected when its width differs from projection_dim.
        self.projection = (
            nn.Linear(config.num_filters, config.projection_dim)
            if config.num_filters != config.projection_dim
            else None
        )

    def forward(self, char_ids):
        """char_ids: (words, max_characters_per_token) -> (words, projection_dim)."""
        chars = self.char_embedding(char_ids)  # (words, chars, char_dim)
        words, _, char_dim = chars.shape
        # Each filter bank: convolution over the characters, max over positions, then the activation. The
        # convolution runs as one matrix product over all windows of `width` characters (faster than conv1d on
        # these shapes); the Conv1d modules only hold the weights.
        features = []
        for conv in self.convolutions:
            count, _, width = conv.weight.shape
            windows = chars.unfold(1, width, 1)  # (words, positions, char_dim, width)
            positions = windows.shape[1]
            responses = torch.addmm(
                conv.bias, windows.reshape(words * positions, char_dim * width), conv.weight.view(count, -1).t()
            ).view(words, positions, count)
            features.append(self.activation(responses.amax(dim=1)))
        token = torch.cat(features, dim=-1)  # (words, num_filters)
        for highway in self.highways:
            token = highway(token)
        return self.projection(token) if self.projection is not None else token


class ElmoBiLstmLayer(nn.Module):
    r"""
    One layer of ELMo's LSTM for both directions at once, with a projected, clipped output.

    Direction 0 is forward, 1 backward (it reads each row's words reversed). Gates are in PyTorch order
    (input, forget, cell, output); `bias` includes the forget bias.

    Args:
        input_dim (int): width of the layer's input.
        lstm_dim (int): memory cell size.
        projection_dim (int): width of the projected output (and of the recurrent input).
        cell_clip (float or None): clip of the memory cell.
        proj_clip (float or None): clip of the projected output.
    """

    def __init__(self, input_dim, lstm_dim, projection_dim, cell_clip, proj_clip):
        super().__init__()
        self.input_weight = nn.Parameter(torch.empty(2, 4 * lstm_dim, input_dim))
        self.recurrent_weight = nn.Parameter(torch.empty(2, 4 * lstm_dim, projection_dim))
        self.bias = nn.Parameter(torch.empty(2, 4 * lstm_dim))
        self.projection_weight = nn.Parameter(torch.empty(2, projection_dim, lstm_dim))
        self.cell_clip = cell_clip
        self.proj_clip = proj_clip

    def forward(self, inputs, batch_sizes, cell, hidden):
        r"""
        Args:
            inputs (`(2, words, input_dim)`): each direction's input, packed step by step: the rows still running
                at step 0, then at step 1, ... (rows sorted by length, longest first; backward rows reversed).
                Padding is never stored, so it costs nothing.
            batch_sizes (list of ints, one per step): rows still running at each step (a prefix of the batch).
            cell (`(2, batch, lstm_dim)`), hidden (`(2, batch, projection_dim)`): the initial state.

        Returns:
            outputs `(2, words, projection_dim)` packed like `inputs`, and the state `(cell, hidden)` after each
            row's last step.
        """
        # The input's share of the gates, for every step at once: (2, words, 4 * lstm_dim).
        gate_inputs = torch.baddbmm(self.bias.unsqueeze(1), inputs, self.input_weight.transpose(1, 2))
        # A contiguous copy: the per-step product with a transposed view is several times slower at small batches.
        recurrent_weight = self.recurrent_weight.transpose(1, 2).contiguous()  # (2, projection_dim, 4 * lstm_dim)
        projection_weight = self.projection_weight.transpose(1, 2)  # (2, lstm_dim, projection_dim)

        outputs = inputs.new_empty(inputs.shape[0], inputs.shape[1], projection_weight.shape[-1])
        ended_cells, ended_hiddens = [], []
        start = 0  # where the current step's rows begin in the packed inputs and outputs
        for active in batch_sizes:
            if active < hidden.shape[1]:
                # Rows past their last word leave the batch; their state is final.
                ended_cells.append(cell[:, active:])
                ended_hiddens.append(hidden[:, active:])
                cell, hidden = cell[:, :active], hidden[:, :active]
            step_rows = slice(start, start + active)
            gates = torch.baddbmm(gate_inputs[:, step_rows], hidden, recurrent_weight)  # (2, active, 4 * lstm_dim)
            input_gate, forget_gate, cell_candidate, output_gate = gates.chunk(4, dim=-1)
            cell = torch.sigmoid(forget_gate) * cell + torch.sigmoid(input_gate) * torch.tanh(cell_candidate)
            if self.cell_clip is not None:
                cell = cell.clamp(-self.cell_clip, self.cell_clip)
            hidden = torch.bmm(torch.sigmoid(output_gate) * torch.tanh(cell), projection_weight)  # (2, active, proj)
            if self.proj_clip is not None:
                hidden = hidden.clamp(-self.proj_clip, self.proj_clip)
            outputs[:, step_rows] = hidden
            start += active

        # Rows that ended later sit earlier in the batch: put the ended pieces back in row order.
        final_cell = torch.cat([cell, *reversed(ended_cells)], dim=1)  # (2, batch, lstm_dim)
        final_hidden = torch.cat([hidden, *reversed(ended_hiddens)], dim=1)  # (2, batch, projection_dim)
        return outputs, (final_cell, final_hidden)


class ElmoBiLstm(nn.Module):
    """ELMo's stacked bidirectional LSTM with optional residual connections between layers."""

    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList(
            ElmoBiLstmLayer(
                config.projection_dim, config.lstm_dim, config.projection_dim, config.cell_clip, config.proj_clip
            )
            for _ in range(config.num_lstm_layers)
        )
        self.use_skip_connections = config.use_skip_connections
        self.lstm_dim = config.lstm_dim
        self.projection_dim = config.projection_dim

    def forward(self, token_embeddings, lengths, lstm_states=None):
        r"""
        Args:
            token_embeddings (`(batch, words, projection_dim)`): right-padded word representations.
            lengths (`(batch,)`): valid words per row.
            lstm_states (optional tuple `(cell, hidden)` of shapes `(layers, 2, batch, lstm_dim)` and
                `(layers, 2, batch, projection_dim)`): the state to start from; zeros when None.

        Returns:
            a list with each layer's output `(batch, words, 2 * projection_dim)`, `[forward; backward]`, 0 at
            padded positions, and the final `(cell, hidden)` state in the shapes above.
        """
        batch, words, _ = token_embeddings.shape
        num_layers = len(self.layers)
        if lstm_states is None:
            cells = token_embeddings.new_zeros(num_layers, 2, batch, self.lstm_dim)
            hiddens = token_embeddings.new_zeros(num_layers, 2, batch, self.projection_dim)
        else:
            cells, hiddens = self._checked_states(lstm_states, batch, token_embeddings)

        # Longest rows first, so the rows still running at any step are a prefix of the batch.
        order = torch.argsort(lengths, descending=True, stable=True)
        sorted_lengths = lengths[order]
        positions = torch.arange(words, device=lengths.device)
        max_length = int(sorted_lengths[0]) if batch else 0
        batch_sizes = (sorted_lengths.unsqueeze(0) > positions[:max_length].unsqueeze(1)).sum(1).tolist()
        # reverse_index[row, t] reads row's valid words backwards; it is its own inverse.
        reverse_index = torch.where(
            positions < sorted_lengths.unsqueeze(1), sorted_lengths.unsqueeze(1) - 1 - positions, positions
        )  # (batch, words)

        forward_input = token_embeddings[order]  # (batch, words, projection_dim)
        backward_input = _gather_words(forward_input, reverse_index)
        # Pack the valid words step by step (time-major), dropping the padding: see ElmoBiLstmLayer.forward.
        packed = (positions < sorted_lengths.unsqueeze(1)).t()  # (words, batch)
        layer_input = torch.stack([forward_input, backward_input]).transpose(1, 2)[:, packed]  # (2, valid, proj)
        layer_outputs, final_cells, final_hiddens = [], [], []
        for index, layer in enumerate(self.layers):
            output, (cell, hidden) = layer(
                layer_input, batch_sizes, cells[index][:, order], hiddens[index][:, order]
            )  # output: (2, valid words, projection_dim)
            if self.use_skip_connections and index > 0:
                output = output + layer_input
            layer_outputs.append(output)
            final_cells.append(cell)
            final_hiddens.append(hidden)
            layer_input = output

        restore = torch.argsort(order)
        results = []
        for output in layer_outputs:
            padded = output.new_zeros(2, words, batch, output.shape[-1])
            padded[:, packed] = output
            padded = padded.transpose(1, 2)  # (2, batch, words, projection_dim), 0 at padded positions
            # reverse_index keeps padded positions in place, so they stay 0.
            both = torch.cat([padded[0], _gather_words(padded[1], reverse_index)], dim=-1)  # (batch, words, 2 * proj)
            results.append(both[restore])
        final_state = (
            torch.stack(final_cells)[:, :, restore],  # (layers, 2, batch, lstm_dim)
            torch.stack(final_hiddens)[:, :, restore],  # (layers, 2, batch, projection_dim)
        )
        return results, final_state

    def _checked_states(self, lstm_states, batch, like):
        if not isinstance(lstm_states, (tuple, list)) or len(lstm_states) != 2:
            raise ValueError("lstm_states must be a (cell, hidden) pair, as returned in ElmoModelOutput.lstm_states")
        cells, hiddens = lstm_states
        expected_cells = (len(self.layers), 2, batch, self.lstm_dim)
        expected_hiddens = (len(self.layers), 2, batch, self.projection_dim)
        if tuple(cells.shape) != expected_cells or tuple(hiddens.shape) != expected_hiddens:
            raise ValueError(
                f"lstm_states must have shapes {expected_cells} and {expected_hiddens} (layers, directions, batch, "
                f"dim), got {tuple(cells.shape)} and {tuple(hiddens.shape)}"
            )
        return cells.to(like), hiddens.to(like)


def _gather_words(sequence, index):
    """sequence (batch, words, dim), index (batch, words) -> sequence[row, index[row, t]] (batch, words, dim)."""
    return sequence.gather(1, index.unsqueeze(-1).expand(-1, -1, sequence.shape[-1]))


class ElmoPreTrainedModel(PreTrainedModel):
    """Weight initialisation as bilm-tf trains from scratch, and the transformers plumbing."""

    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"

    def _init_weights(self, module):
        if isinstance(module, ElmoCharacterEncoder):
            init.uniform_(module.char_embedding.weight, -1.0, 1.0)
            if not getattr(module.char_embedding.weight, "_is_hf_initialized", False):
                init.zeros_(module.char_embedding.weight[0])
            for conv, (width, _) in zip(module.convolutions, self.config.filters):
                if self.config.activation == "relu":
                    init.uniform_(conv.weight, -0.05, 0.05)
                else:
                    init.normal_(conv.weight, 0.0, math.sqrt(1.0 / (width * self.config.char_embedding_dim)))
                init.zeros_(conv.bias)
            if module.projection is not None:
                init.normal_(module.projection.weight, 0.0, math.sqrt(1.0 / self.config.num_filters))
                init.zeros_(module.projection.bias)
        elif isinstance(module, ElmoHighway):
            std = math.sqrt(1.0 / module.transform.in_features)
            init.normal_(module.transform.weight, 0.0, std)
            init.zeros_(module.transform.bias)
            init.normal_(module.gate.weight, 0.0, std)
            init.constant_(module.gate.bias, -2.0)  # starts close to the identity
        elif isinstance(module, ElmoBiLstmLayer):
            four_lstm_dim, input_dim = module.input_weight.shape[1:]
            bound = math.sqrt(6.0 / (input_dim + module.recurrent_weight.shape[-1] + four_lstm_dim))
            init.uniform_(module.input_weight, -bound, bound)
            init.uniform_(module.recurrent_weight, -bound, bound)
            lstm_dim = four_lstm_dim // 4
            bias = torch.zeros(2, four_lstm_dim)
            bias[:, lstm_dim : 2 * lstm_dim] = 1.0  # forget gate bias of 1, as TensorFlow's LSTMCell
            init.copy_(module.bias, bias)
            projection_bound = math.sqrt(6.0 / (lstm_dim + module.projection_weight.shape[1]))
            init.uniform_(module.projection_weight, -projection_bound, projection_bound)
        else:
            # Children are initialised before their parents, so the cases above override this default.
            super()._init_weights(module)


class ElmoModel(ElmoPreTrainedModel):
    r"""
    The ELMo biLM. Stateless by default: a sentence's output does not depend on its batch-mates, on padding
    or on earlier calls. bilm-tf's stateful behaviour is available through `lstm_states`.
    """

    def __init__(self, config):
        super().__init__(config)
        self.character_encoder = ElmoCharacterEncoder(config)
        self.encoder = ElmoBiLstm(config)
        self.post_init()

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        output_hidden_states=None,
        return_dict=None,
        lstm_states=None,
        **kwargs,
    ):
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, words, max_characters_per_token)`): character ids from
                [`ElmoTokenizer`]; a word of all zeros is padding.
            attention_mask (`torch.LongTensor` of shape `(batch, words)`, optional): 1 for words, 0 for padding,
                which must come after each row's words. Derived from `input_ids` when not given.
            output_hidden_states (bool, optional): also return every layer in `hidden_states`.
            return_dict (bool, optional): return an [`ElmoModelOutput`] (default) or a tuple.
            lstm_states (tuple `(cell, hidden)`, optional): continue each row from this LSTM state (the
                `lstm_states` of the previous output, same batch size) instead of from zeros.

        Returns:
            [`ElmoModelOutput`].
        """
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        mask = self._word_mask(input_ids, attention_mask)
        lengths = mask.sum(dim=1)

        batch, words, _ = input_ids.shape
        # The character encoder runs once per distinct word of the batch (frequent words repeat a lot).
        distinct_words, word_index = torch.unique(input_ids[mask], dim=0, return_inverse=True)
        token_embeddings = self.character_encoder(distinct_words)[word_index]  # (valid words, projection_dim)
        token_layer = token_embeddings.new_zeros(batch, words, self.config.projection_dim)
        token_layer = token_layer.masked_scatter(mask.unsqueeze(-1), token_embeddings)  # (batch, words, proj)
        lstm_layers, final_state = self.encoder(token_layer, lengths, lstm_states)

        hidden_states = (torch.cat([token_layer, token_layer], dim=-1), *lstm_layers)  # each (batch, words, 2*proj)
        output = ElmoModelOutput(
            last_hidden_state=lstm_layers[-1],
            hidden_states=hidden_states if output_hidden_states else None,
            lstm_states=final_state,
        )
        return output if return_dict else output.to_tuple()

    def _word_mask(self, input_ids, attention_mask):
        """(batch, words) bool mask of real words, after checking the inputs' shapes and padding side."""
        if input_ids is None:
            raise ValueError("input_ids is required")
        chars = self.config.max_characters_per_token
        if input_ids.dim() != 3 or input_ids.shape[-1] != chars:
            raise ValueError(
                f"input_ids must have shape (batch, words, {chars}) (character ids from ElmoTokenizer), "
                f"got {tuple(input_ids.shape)}"
            )
        if attention_mask is None:
            mask = (input_ids > 0).any(dim=-1)
        else:
            if tuple(attention_mask.shape) != tuple(input_ids.shape[:2]):
                raise ValueError(
                    f"attention_mask must have shape {tuple(input_ids.shape[:2])} (batch, words), "
                    f"got {tuple(attention_mask.shape)}"
                )
            mask = attention_mask.bool()
        lengths = mask.sum(dim=1, keepdim=True)
        if not torch.equal(mask, torch.arange(mask.shape[1], device=mask.device) < lengths):
            raise ValueError(
                "ElmoModel needs right padding: in every row the words must come first and the padding after "
                "(tokenize with padding_side='right')"
            )
        return mask


__all__ = ["ElmoModel", "ElmoPreTrainedModel", "ElmoModelOutput"]
