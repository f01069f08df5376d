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
        # A parameter of this module (not an nn.Embedding) so that transformers initialises the whole encoder here.
        self.char_embedding = nn.Parameter(torch.empty(config.num_characters, config.char_embedding_dim))
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
        chars = F.embedding(char_ids, self.char_embedding, padding_idx=0).transpose(1, 2)  # (words, char_dim, chars)
        # Each filter bank: convolution over the characters, max over positions, then the activation.
        features = [self.activation(conv(chars).amax(dim=-1)) for conv in self.convolutions]
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
            inputs (`(2, batch, steps, input_dim)`): each direction's input, rows sorted by length (longest
                first) and backward rows already reversed.
            batch_sizes (list of ints, one per step): rows still running at each step (a prefix of the batch).
            cell (`(2, batch, lstm_dim)`), hidden (`(2, batch, projection_dim)`): the initial state.

        Returns:
            outputs `(2, batch, steps, projection_dim)` (0 past each row's end), and the state `(cell, hidden)`
            after each row's last step.
        """
        directions, batch, steps, input_dim = inputs.shape
        # The input's share of the gates, for every step at once.
        gate_inputs = torch.baddbmm(
            self.bias.unsqueeze(1),  # (2, 1, 4 * lstm_dim)
            inputs.reshape(directions, batch * steps, input_dim),
            self.input_weight.transpose(1, 2),
        ).view(directions, batch, steps, -1)  # (2, batch, steps, 4 * lstm_dim)
        # One view per step: the backward pass then stacks the steps' gradients once, where indexing the whole
        # tensor at every step would fill a zero gradient of its full size per step.
        step_inputs = gate_inputs.unbind(2)  # steps x (2, batch, 4 * lstm_dim)
        recurrent_weight = self.recurrent_weight.transpose(1, 2)  # (2, projection_dim, 4 * lstm_dim)
        projection_weight = self.projection_weight.transpose(1, 2)  # (2, lstm_dim, projection_dim)

        outputs, ended_cells, ended_hiddens = [], [], []
        for step, active in enumerate(batch_sizes):
            if active < hidden.shape[1]:
                # Rows past their last word leave the batch; their state is final.
                ended_cells.append(cell[:, active:])
                ended_hiddens.append(hidden[:, active:])
                cell, hidden = cell[:, :active], hidden[:, :active]
            gates = torch.baddbmm(step_inputs[step][:, :active], hidden, recurrent_weight)  # (2, active, 4 * lstm_dim)
            input_gate, forget_gate, cell_candidate, output_gate = gates.chunk(4, dim=-1)
            cell = torch.sigmoid(forget_gate) * cell + torch.sigmoid(input_gate) * torch.tanh(cell_candidate)
            if self.cell_clip is not None:
                cell = cell.clamp(-self.cell_clip, self.cell_clip)
            hidden = torch.bmm(torch.sigmoid(output_gate) * torch.tanh(cell), projection_weight)  # (2, active, proj)
            if self.proj_clip is not None:
                hidden = hidden.clamp(-self.proj_clip, self.proj_clip)
            outputs.append(F.pad(hidden, (0, 0, 0, batch - active)))  # (2, batch, projection_dim)

        outputs += [hidden.new_zeros(directions, batch, hidden.shape[-1])] * (steps - len(outputs))
        # Rows that ended later sit earlier in the batch: put the ended pieces back in row order.
        final_cell = torch.cat([cell, *reversed(ended_cells)], dim=1)  # (2, batch, lstm_dim)
        final_hidden = torch.cat([hidden, *reversed(ended_hiddens)], dim=1)  # (2, batch, projection_dim)
        return torch.stack(outputs, dim=2), (final_cell, final_hidden)  # (2, batch, steps, projection_dim)


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
        layer_input = torch.stack([forward_input, backward_input])  # (2, batch, words, projection_dim)
        layer_outputs, final_cells, final_hiddens = [], [], []
        for index, layer in enumerate(self.layers):
            output, (cell, hidden) = layer(
                layer_input, batch_sizes, cells[index][:, order], hiddens[index][:, order]
            )  # output: (2, batch, words, projection_dim)
            if self.use_skip_connections and index > 0:
                output = output + layer_input
            layer_outputs.append(output)
            final_cells.append(cell)
            final_hiddens.append(hidden)
            layer_input = output

        restore = torch.argsort(order)
        valid = (positions < lengths.unsqueeze(1)).unsqueeze(-1)  # (batch, words, 1)
        results = []
        for output in layer_outputs:
            both = torch.cat([output[0], _gather_words(output[1], reverse_index)], dim=-1)  # (batch, words, 2 * proj)
            results.append(both[restore] * valid)
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
        # transformers calls this for modules with parameters of their own, children before parents.
        if isinstance(module, ElmoCharacterEncoder):
            if not getattr(module.char_embedding, "_is_hf_initialized", False):
                embedding = torch.empty_like(module.char_embedding).uniform_(-1.0, 1.0)
                embedding[0] = 0.0  # id 0 is padding
                init.copy_(module.char_embedding, embedding)
            for conv, (width, _) in zip(module.convolutions, self.config.filters):
                if self.config.activation == "relu":
                    init.uniform_(conv.weight, -0.05, 0.05)
                else:
                    init.normal_(conv.weight, 0.0, math.sqrt(1.0 / (width * self.config.char_embedding_dim)))
                init.zeros_(conv.bias)
            for highway in module.highways:
                std = math.sqrt(1.0 / self.config.num_filters)
                init.normal_(highway.transform.weight, 0.0, std)
                init.zeros_(highway.transform.bias)
                init.normal_(highway.gate.weight, 0.0, std)
                init.constant_(highway.gate.bias, -2.0)  # starts close to the identity
            if module.projection is not None:
                init.normal_(module.projection.weight, 0.0, math.sqrt(1.0 / self.config.num_filters))
                init.zeros_(module.projection.bias)
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
        token_embeddings = self.character_encoder(input_ids[mask])  # (valid words, projection_dim)
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


@dataclass
class ElmoForPreTrainingOutput(ModelOutput):
    r"""
    Outputs of [`ElmoForPreTraining`]. W counts the words of the input, sentence boundaries included; V is
    `config.vocab_size`.

    Args:
        loss (`torch.FloatTensor` of shape `()`, returned when `labels` are given):
            `(forward_loss + backward_loss) / 2`.
        forward_loss (`torch.FloatTensor` of shape `()`, returned when `labels` are given): mean negative
            log-likelihood of every next word (the full softmax in eval mode, the sampled one in training).
        backward_loss (`torch.FloatTensor` of shape `()`, returned when `labels` are given): the same for every
            previous word.
        forward_logits (`torch.FloatTensor` of shape `(batch, W, V)`, returned when `return_logits=True`):
            position t scores the word at t + 1 from the top forward state at t.
        backward_logits (`torch.FloatTensor` of shape `(batch, W, V)`, returned when `return_logits=True`):
            position t scores the word at t - 1 from the top backward state at t.
        last_hidden_state (`torch.FloatTensor` of shape `(batch, W, 2 * projection_dim)`): as in [`ElmoModelOutput`].
        lstm_states (tuple of two `torch.FloatTensor`s): as in [`ElmoModelOutput`], to continue each row.
    """

    loss: torch.FloatTensor | None = None
    forward_loss: torch.FloatTensor | None = None
    backward_loss: torch.FloatTensor | None = None
    forward_logits: torch.FloatTensor | None = None
    backward_logits: torch.FloatTensor | None = None
    last_hidden_state: torch.FloatTensor | None = None
    lstm_states: tuple[torch.FloatTensor, torch.FloatTensor] | None = None


class ElmoLogUniformSampler:
    r"""
    Draws softmax negatives from the log-uniform (Zipfian) distribution over a vocabulary sorted by decreasing
    frequency, `P(k) = log((k + 2) / (k + 1)) / log(V + 1)`, without repeats, and reports each candidate's expected
    count as TensorFlow's `log_uniform_candidate_sampler(unique=True)` defines it: after `tries` draws,
    `1 - (1 - P(k)) ** tries`. Drawing all V classes includes each with probability 1 (expected count 1).

    Args:
        vocab_size (int): V.
    """

    def __init__(self, vocab_size):
        self.vocab_size = vocab_size
        # On the CPU even when the model is built on the meta device (from_pretrained): this is no parameter.
        ids = torch.arange(vocab_size, dtype=torch.float64, device="cpu")
        self.log_probabilities = torch.log(torch.log1p(1.0 / (ids + 1.0)) / math.log(vocab_size + 1.0))  # (V,)

    def sample(self, num_sampled, generator=None):
        """Returns `num_sampled` distinct class ids `(num_sampled,)` and the number of draws it took."""
        if num_sampled == self.vocab_size:
            return torch.arange(self.vocab_size), None
        draws = torch.empty(0, dtype=torch.long)
        while True:
            uniform = torch.rand(2 * num_sampled, dtype=torch.float64, generator=generator)
            # Inverse CDF of the log-uniform distribution: floor((V + 1) ** u) - 1.
            new = (torch.exp(uniform * math.log(self.vocab_size + 1.0)).floor().long() - 1).clamp(0, self.vocab_size - 1)
            draws = torch.cat([draws, new])
            values, inverse = torch.unique(draws, return_inverse=True)
            if len(values) >= num_sampled:
                break
        # First draw of each distinct value, in drawing order; the num_sampled-th one ends the sampling.
        positions = torch.arange(len(draws))
        first_draw = torch.full((len(values),), len(draws)).scatter_reduce(0, inverse, positions, reduce="amin")
        first_draw = first_draw.sort().values[:num_sampled]
        return draws[first_draw], int(first_draw[-1]) + 1

    def log_expected_counts(self, ids, tries):
        """log of the expected count of each class in `ids` (any shape) after `tries` draws (None: all drawn)."""
        if tries is None:
            return torch.zeros(ids.shape, dtype=torch.float64)
        # 1 - (1 - p) ** tries, computed as -expm1(tries * log1p(-p)) to stay exact for tiny p.
        return torch.log(-torch.expm1(tries * torch.log1p(-torch.exp(self.log_probabilities[ids]))))


def elmo_sampled_softmax_loss(hidden, targets, weight, bias, sampled, log_expected_targets, log_expected_sampled):
    r"""
    Sampled softmax cross-entropy, as TensorFlow's `sampled_softmax_loss` with `remove_accidental_hits=True`:
    each logit is lowered by the log of its class's expected count, and a negative equal to the row's target is
    removed.

    Args:
        hidden (`(N, projection_dim)`): the states predicting the targets.
        targets (`(N,)`): target class ids.
        weight (`(V, projection_dim)`), bias (`(V,)`): the softmax.
        sampled (`(S,)`): negative class ids shared by all rows.
        log_expected_targets (`(N,)`), log_expected_sampled (`(S,)`): log expected counts of the classes.

    Returns:
        the mean loss over the N rows, a scalar.
    """
    target_logits = (hidden * weight[targets]).sum(-1) + bias[targets] - log_expected_targets  # (N,)
    sampled_logits = hidden @ weight[sampled].T + bias[sampled] - log_expected_sampled  # (N, S)
    accidental_hits = targets.unsqueeze(1) == sampled.unsqueeze(0)  # (N, S)
    sampled_logits = sampled_logits.masked_fill(accidental_hits, torch.finfo(sampled_logits.dtype).min)
    logits = torch.cat([target_logits.unsqueeze(1), sampled_logits], dim=1)  # (N, 1 + S), target in column 0
    return F.cross_entropy(logits, targets.new_zeros(len(targets)))


class ElmoForPreTraining(ElmoPreTrainedModel):
    r"""
    The ELMo biLM with its language-model softmax: one softmax (`lm_head`, weight `(vocab_size, projection_dim)`
    and bias) shared by both directions. The forward direction predicts the next word from the top forward state,
    the backward direction the previous word from the top backward state; `loss = (forward_loss + backward_loss)
    / 2`. In training mode with `config.num_sampled_negatives > 0` the losses use a sampled softmax (log-uniform
    negatives, see [`ElmoLogUniformSampler`]); in eval mode always the full softmax.
    """

    # The loss is a mean over this batch's targets and takes no `num_items_in_batch`: without this flag the Trainer
    # (seeing `**kwargs` in `forward`) would scale the loss by the number of processes.
    accepts_loss_kwargs = False

    def __init__(self, config):
        super().__init__(config)
        if not config.vocab_size:
            raise ValueError("ElmoForPreTraining needs config.vocab_size > 0 (the size of the word vocabulary), got 0")
        self.elmo = ElmoModel(config)
        self.lm_head = nn.Linear(config.projection_dim, config.vocab_size)
        self.sampler = ElmoLogUniformSampler(config.vocab_size)
        self.post_init()

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        labels=None,
        lstm_states=None,
        return_logits=False,
        return_dict=None,
        **kwargs,
    ):
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, W, max_characters_per_token)`): character ids from
                [`ElmoTokenizer`], sentence boundaries included.
            attention_mask (`torch.LongTensor` of shape `(batch, W)`, optional): 1 for words, 0 for right padding.
            labels (`torch.LongTensor` of shape `(batch, W)`, optional): the word id (in `[0, vocab_size)`) of the
                word AT each position, `<S>`/`</S>` included, -100 where there is none (padding); the tokenizer's
                `word_labels` when it has a vocabulary. The forward target at position t is `labels[:, t + 1]`,
                the backward target at t is `labels[:, t - 1]`; targets equal to -100 are not counted.
            lstm_states (tuple `(cell, hidden)`, optional): continue each row from this LSTM state.
            return_logits (bool, defaults to False): also return `forward_logits` and `backward_logits`
                (`(batch, W, vocab_size)` each, large for big vocabularies).
            return_dict (bool, optional): return an [`ElmoForPreTrainingOutput`] (default) or a tuple.

        Returns:
            [`ElmoForPreTrainingOutput`].
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.elmo(input_ids, attention_mask=attention_mask, lstm_states=lstm_states, return_dict=True)
        top = outputs.last_hidden_state  # (batch, W, 2 * projection_dim)
        forward_states, backward_states = top.split(self.config.projection_dim, dim=-1)  # each (batch, W, proj)

        loss = forward_loss = backward_loss = None
        if labels is not None:
            if tuple(labels.shape) != tuple(top.shape[:2]):
                raise ValueError(
                    f"labels must have shape {tuple(top.shape[:2])} (batch, words), got {tuple(labels.shape)}"
                )
            bad = (labels != -100) & ((labels < 0) | (labels >= self.config.vocab_size))
            if bad.any():
                raise ValueError(
                    f"labels must be word ids in [0, {self.config.vocab_size}) or -100, got {int(labels[bad][0])}"
                )
            words = attention_mask.bool() if attention_mask is not None else (input_ids > 0).any(dim=-1)  # (batch, W)
            # Forward: the state at t predicts labels[t + 1]; backward: the state at t + 1 predicts labels[t].
            # A target counts only when the predicting position is a word (padded states are 0).
            forward_targets = labels[:, 1:].masked_fill(~words[:, :-1], -100)  # (batch, W - 1)
            backward_targets = labels[:, :-1].masked_fill(~words[:, 1:], -100)  # (batch, W - 1)
            forward_loss = self._direction_loss(forward_states[:, :-1], forward_targets)
            backward_loss = self._direction_loss(backward_states[:, 1:], backward_targets)
            loss = (forward_loss + backward_loss) / 2

        output = ElmoForPreTrainingOutput(
            loss=loss,
            forward_loss=forward_loss,
            backward_loss=backward_loss,
            forward_logits=self.lm_head(forward_states) if return_logits else None,  # (batch, W, V)
            backward_logits=self.lm_head(backward_states) if return_logits else None,  # (batch, W, V)
            last_hidden_state=top,
            lstm_states=outputs.lstm_states,
        )
        return output if return_dict else output.to_tuple()

    def _init_weights(self, module):
        if module is self.lm_head:
            # bilm-tf's softmax init: normal with std 1 / sqrt(projection_dim), zero bias.
            init.normal_(module.weight, 0.0, 1.0 / math.sqrt(self.config.projection_dim))
            init.zeros_(module.bias)
        else:
            super()._init_weights(module)

    def _direction_loss(self, states, targets):
        """Mean loss of `states` (batch, T, proj) predicting `targets` (batch, T), -100 not counted."""
        counted = targets != -100  # (batch, T)
        if not counted.any():
            raise ValueError("labels hold no target: every word to predict is -100")
        hidden, targets = states[counted], targets[counted]  # (N, proj), (N,)
        num_sampled = self.config.num_sampled_negatives
        if not self.training or num_sampled == 0:
            return F.cross_entropy(self.lm_head(hidden), targets)
        sampled, tries = self.sampler.sample(num_sampled)
        log_expected = self.sampler.log_expected_counts(torch.cat([targets.cpu(), sampled]), tries)
        log_expected = log_expected.to(hidden)  # (N + S,)
        return elmo_sampled_softmax_loss(
            hidden,
            targets,
            self.lm_head.weight,
            self.lm_head.bias,
            sampled.to(targets.device),
            log_expected[: len(targets)],
            log_expected[len(targets) :],
        )


__all__ = [
    "ElmoModel",
    "ElmoPreTrainedModel",
    "ElmoModelOutput",
    "ElmoForPreTraining",
    "ElmoForPreTrainingOutput",
    "ElmoLogUniformSampler",
    "elmo_sampled_softmax_loss",
]
