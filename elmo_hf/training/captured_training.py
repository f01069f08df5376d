"""The biLM's training step on static shapes, replayed from a CUDA graph per bucketed batch shape.

On a GPU the eager training step is bound by kernel launches: the packed recurrence launches a dozen small kernels
per step and layer, forward and backward, and the host's checks and index tables add syncs (benchmarks/RESULTS.md,
"Training the biLM on a GPU", gives the profile and its command). `PreTrainingStep` runs
`ElmoForPreTraining`'s loss, its backward and the gradient clipping with no host sync and no data-dependent shape, on
a batch padded to its bucket (rows to a power of two, words to a multiple of `WORD_BUCKET`), so that on a CUDA device
each bucket is captured once as a CUDA graph and replayed with one launch; elsewhere the same code runs eagerly (the
CPU tests hold it to the eager model there). The optimizer's step stays outside the graph (any optimizer, any
schedule), and reads the gradients the graph writes into each parameter's `.grad`.

What changes against `ElmoForPreTraining.forward` in training mode, and why the loss and gradients stay the same up to
rounding:
- every position of the padded batch is encoded by the character CNN (the eager path encodes each distinct word
  once, a data-dependent shape) and padding is zeroed after; rows of the character embedding and of the softmax are
  looked up with index_select, whose backward (index_add_) makes no host sync;
- the biLSTM runs `lstm_training_kernel.py`'s recurrence on `PaddedSteps`: every row steps through the whole width,
  each direction reading its row's words first (the backward one reversed) and its padding after, so padded steps
  come after a row's words and change neither its outputs nor, since their gradient is exactly zero, the gradients;
- the sampled softmax runs on every position with a 0/1 weight for the counted targets, accidental hits masked by a
  comparison instead of a gather of their positions; the negatives are drawn on the host by the model's sampler, as
  the eager path draws them (forward direction first), and copied in.
Dropout draws its masks over the padded shapes, so with dropout the two paths draw different masks.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F

from ..model.lstm_training_kernel import bilstm_training_forward

if TYPE_CHECKING:
    from ..model.modeling_elmo import ElmoForPreTraining

# Words per row are padded up to a multiple of this (the inference graphs' bucket, cuda_graphs.WORD_BUCKET).
WORD_BUCKET = 8


def bucket_shape(batch: int, words: int, word_bucket: int = WORD_BUCKET) -> tuple[int, int]:
    """The padded `(rows, width)` of a `(batch, words)` batch: rows up to the next power of two, words up to the next
    multiple of `word_bucket`."""
    if batch < 1 or words < 1:
        raise ValueError(f"a training batch needs at least one row and one word, got shape ({batch}, {words})")
    return 1 << (batch - 1).bit_length(), -(-words // word_bucket) * word_bucket


class PaddedSteps:
    r"""
    `packed_steps.PackedSteps`'s tables for a padded batch in which every row runs every step: the layout of
    `lstm_training_kernel.py` with a constant batch, built from the lengths with tensor operations only (no host
    sync, shapes fixed by `(rows, words)`).

    Position `t * rows + r` holds row `r` at step `t`. Direction 0 reads row `r`'s words in order, direction 1 reads
    its `L_r` words backwards; both then read the padding, so a row's padded steps follow its last word.

    Args:
        lengths (`(rows,)` int tensor): real words per row (0 allowed).
        words (int): the padded batch's width.
    """

    def __init__(self, lengths: torch.Tensor, words: int) -> None:
        device = lengths.device
        rows = lengths.shape[0]
        self.order = torch.arange(rows, device=device)
        self.batch_sizes = [rows] * words
        self.valid = valid = rows * words
        self.words = words
        step = torch.arange(words, device=device).unsqueeze(1)  # (words, 1)
        row = self.order.unsqueeze(0)  # (1, rows)
        length = lengths.unsqueeze(0)  # (1, rows)
        inside = step < length  # (words, rows)
        reversed_step = torch.where(inside, length - 1 - step, step)  # direction 1's word at each step
        self.pack_index = torch.stack([(row * words + step).flatten(), (row * words + reversed_step).flatten()])
        position = step * rows + row  # (words, rows): the packed position of (step, row)
        # Each padded word (row, word) of direction 1 sits at its step L - 1 - word, padding at no step.
        padding = torch.full_like(position, valid)
        forward = torch.where(inside, position, padding)
        backward = torch.where(inside, reversed_step * rows + row, padding)
        self.unpack_index = torch.stack([forward.t().flatten(), backward.t().flatten()])  # (2, rows * words)
        previous = torch.cat([valid + row, position[:-1]])  # step 0 reads the initial state, after the steps
        self.previous_index = previous.flatten()
        last = (lengths - 1).clamp(min=0) * rows + self.order
        self.last_index = torch.where(lengths > 0, last, valid + self.order)

    def pack(self, sequence: torch.Tensor) -> torch.Tensor:
        """A right-padded `(rows, words, *dims)` tensor -> each direction's steps `(2, rows * words, *dims)`."""
        flat = sequence.reshape(-1, *sequence.shape[2:])
        return flat.index_select(0, self.pack_index.flatten()).view(2, self.valid, *sequence.shape[2:])

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """Each direction's steps `(2, rows * words, dim)` -> `(rows, words, 2 * dim)`, 0 at padding."""
        _, _, dim = packed.shape
        with_zero_row = torch.cat([packed, packed.new_zeros(2, 1, dim)], dim=1)
        both = [with_zero_row[direction].index_select(0, self.unpack_index[direction]) for direction in range(2)]
        return torch.cat(both, dim=-1).view(-1, self.words, 2 * dim)

    def final_states(self, packed_states: torch.Tensor, initial: torch.Tensor) -> torch.Tensor:
        """Each row's state after its last word `(2, rows, dim)` (the initial state for an empty row)."""
        return torch.cat([packed_states, initial], dim=1).index_select(1, self.last_index)


def static_sampled_softmax_loss(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    sampled: torch.Tensor,
    log_expected_sampled: torch.Tensor,
    tries: torch.Tensor,
    log_probabilities: torch.Tensor,
) -> torch.Tensor:
    r"""
    `modeling_elmo.elmo_sampled_softmax_loss` over every position, with no data-dependent shape.

    Args:
        hidden (`(N, projection_dim)`): the states, padding included.
        targets (`(N,)`): target ids, -100 where none counts.
        weight (`(V, projection_dim)`), bias (`(V,)`): the softmax.
        sampled (`(S,)`): distinct negative ids; log_expected_sampled (`(S,)`): their log expected counts.
        tries (`()` float64 tensor): the sampler's draws (`inf` when every class was drawn: expected count 1).
        log_probabilities (`(V,)` float64): the sampler's log-uniform log probabilities.

    Returns:
        the mean loss over the counted rows, a scalar (NaN when none counts: the eager path refuses such labels).
    """
    counted = targets != -100
    safe_targets = targets.clamp(min=0)
    # ElmoLogUniformSampler.log_expected_counts, on the device: 1 - (1 - p) ** tries.
    # Rows looked up with index_select: its backward (index_add_) makes no host sync.
    log_probabilities = log_probabilities.index_select(0, safe_targets)
    log_expected_targets = torch.log(-torch.expm1(tries * torch.log1p(-torch.exp(log_probabilities))))
    target_logits = (hidden * weight.index_select(0, safe_targets)).sum(-1) + bias.index_select(0, safe_targets)
    target_logits = target_logits - log_expected_targets.to(hidden)
    sampled_bias = bias.index_select(0, sampled) - log_expected_sampled.to(hidden)
    sampled_logits = torch.addmm(sampled_bias, hidden, weight.index_select(0, sampled).T)
    hits = safe_targets.unsqueeze(1) == sampled.unsqueeze(0)  # (N, S): a negative equal to the row's target
    sampled_logits = sampled_logits.masked_fill(hits, torch.finfo(sampled_logits.dtype).min)
    all_logits = torch.logaddexp(target_logits, torch.logsumexp(sampled_logits, dim=1))
    weights = counted.to(hidden.dtype)
    return ((all_logits - target_logits) * weights).sum() / weights.sum()


def padded_pretraining_loss(
    model: ElmoForPreTraining,
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    labels: torch.Tensor,
    draws: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    log_probabilities: torch.Tensor,
) -> torch.Tensor:
    r"""
    `ElmoForPreTraining(...).loss` in training mode on a padded batch, with static shapes and no host sync.

    Args:
        model (`ElmoForPreTraining`): in training mode (its `config.pretraining_dropout` applies).
        input_ids (`(rows, words, chars)`), mask (`(rows, words)` bool, right-padded), labels (`(rows, words)`, -100
            at padding): the padded batch.
        draws: for the forward then the backward direction, `(sampled (S,), log_expected_sampled (S,), tries ())`
            (ignored without sampled negatives).
        log_probabilities (`(V,)` float64): the sampler's table on the model's device.

    Returns:
        the loss, a scalar.
    """
    config = model.config
    dropout = config.pretraining_dropout
    elmo = model.elmo
    rows, words = mask.shape
    token_layer = _encode_words(elmo.character_encoder, input_ids).masked_fill(~mask.unsqueeze(-1), 0.0)
    cells = token_layer.new_zeros(len(elmo.encoder.layers), 2, rows, config.lstm_dim)
    hiddens = token_layer.new_zeros(len(elmo.encoder.layers), 2, rows, config.projection_dim)
    steps = PaddedSteps(mask.sum(dim=1), words)
    layers, _, _ = bilstm_training_forward(
        elmo.encoder, token_layer, mask, cells, hiddens, dropout, zero_state=True, steps=steps
    )
    top = layers[-1]
    if dropout:
        top = F.dropout(top, dropout, training=True)
    forward_states, backward_states = top.split(config.projection_dim, dim=-1)
    forward_targets = labels[:, 1:].masked_fill(~mask[:, :-1], -100)
    backward_targets = labels[:, :-1].masked_fill(~mask[:, 1:], -100)
    losses = []
    for states, targets, draw in (
        (forward_states[:, :-1], forward_targets, draws[0]),
        (backward_states[:, 1:], backward_targets, draws[1]),
    ):
        hidden, targets = states.reshape(-1, config.projection_dim), targets.reshape(-1)
        if config.num_sampled_negatives == 0:
            losses.append(F.cross_entropy(model.lm_head(hidden), targets, ignore_index=-100))
        else:
            losses.append(
                static_sampled_softmax_loss(
                    hidden, targets, model.lm_head.weight, model.lm_head.bias, *draw, log_probabilities
                )
            )
    return (losses[0] + losses[1]) / 2


def _encode_words(character_encoder: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """`character_encoder(input_ids)` `(rows, words, chars)` -> `(rows, words, projection_dim)`, its character
    embedding looked up with index_select (whose backward, index_add_, makes no host sync), the padding id's row given
    no gradient as `padding_idx` gives it none."""
    if character_encoder.word_embedding is not None:
        return character_encoder(input_ids)
    table = character_encoder.char_embedding
    table = torch.cat([table[:1].detach(), table[1:]])  # (num_characters, char_dim)
    chars = table.index_select(0, input_ids.flatten()).view(-1, input_ids.shape[-1], table.shape[-1])
    token = character_encoder.highway_and_project(character_encoder.convolve(chars))  # (rows * words, proj)
    return token.view(*input_ids.shape[:-1], -1)


class PreTrainingStep:
    r"""
    `ElmoForPreTraining`'s training step up to the optimizer: loss, backward into each parameter's `.grad`, and
    gradient clipping, on the batch padded to its bucket (`bucket_shape`). On a CUDA device each bucket's step is
    captured as a CUDA graph at its first batch (a warm-up run, then the capture) and replayed after; elsewhere it
    runs eagerly, as does every bucket after a capture fails (a warning says so; `capture_failure` keeps the error).

    The parameters' `.grad` are static tensors that every step overwrites: call `optimizer.step()` after each step,
    and never `optimizer.zero_grad()` (which would drop them; the step needs no zeroing).

        step = PreTrainingStep(model, max_grad_norm=10.0)
        for batch in batches:
            loss = step(batch["input_ids"], batch["attention_mask"], labels)  # a 0-d tensor on the device
            optimizer.step()

    Args:
        model (`ElmoForPreTraining`): in training mode, on its device; its parameters must keep their storage (a
            graph reads them by address).
        max_grad_norm (float, optional): clip the gradients' total norm to this, as `clip_grad_norm_`.
        capture (bool, optional): capture CUDA graphs; defaults to whether the model is on a CUDA device.
    """

    def __init__(
        self, model: ElmoForPreTraining, max_grad_norm: float | None = None, capture: bool | None = None
    ) -> None:
        self.model = model
        self.device = model.lm_head.weight.device
        self.capture = self.device.type == "cuda" if capture is None else capture
        self.max_grad_norm = max_grad_norm
        self.parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
        for parameter in self.parameters:
            parameter.grad = torch.zeros_like(parameter)
        self.log_probabilities = model.sampler.log_probabilities.to(self.device)
        self.buckets: dict[tuple[int, int], _BucketStep] = {}  # (rows, width) -> _BucketStep
        self.pool = torch.cuda.graph_pool_handle() if self.capture else None
        self.capture_failure: RuntimeError | None = (
            None  # the error of a capture that failed (its bucket then runs eagerly)
        )

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        r"""
        One step on a batch.

        Args:
            input_ids (`(batch, words, chars)`), attention_mask (`(batch, words)`), labels (`(batch, words)`, -100
                where none): as for `ElmoForPreTraining.forward`, right-padded, on any device.

        Returns:
            the loss, a 0-d tensor on the model's device (a copy: the graph's own is overwritten at the next step).
        """
        batch, words = attention_mask.shape
        key = bucket_shape(batch, words)
        draws = [self._draw(), self._draw()]  # the forward direction's first, as the eager path draws them
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = _BucketStep(self, *key, input_ids.shape[-1])
            bucket.load(input_ids, attention_mask, labels, draws)
            bucket.build()
        else:
            bucket.load(input_ids, attention_mask, labels, draws)
        bucket.run()
        assert bucket.loss is not None  # run() sets it, or the graph's capture did
        return bucket.loss.detach().clone()

    def _draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One direction's negatives on the host, as `(ids (S,) int64, [log expected counts..., tries] (S + 1,)
        float64)`."""
        sampler, count = self.model.sampler, self.model.config.num_sampled_negatives
        if count == 0:
            return torch.zeros(1, dtype=torch.long), torch.zeros(2, dtype=torch.float64)
        sampled, tries = sampler.sample(count)
        expected = sampler.log_expected_counts(sampled, tries)
        tail = torch.tensor([float("inf") if tries is None else float(tries)], dtype=torch.float64)
        return sampled, torch.cat([expected, tail])

    def _step(self, bucket: _BucketStep) -> torch.Tensor:
        """The captured work: loss, gradients into the static `.grad`, clipping. Returns the loss."""
        draws = [(ids, floats[:-1], floats[-1]) for ids, floats in zip(bucket.sampled, bucket.floats)]
        loss = padded_pretraining_loss(
            self.model, bucket.input_ids, bucket.mask, bucket.labels, draws, self.log_probabilities
        )
        grads = torch.autograd.grad(loss, self.parameters, allow_unused=True)
        for parameter, grad in zip(self.parameters, grads):
            static = cast(torch.Tensor, parameter.grad)  # set in __init__, never dropped (no zero_grad)
            if grad is None:
                static.zero_()
            else:
                static.copy_(grad)
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm)
        return loss


class _BucketStep:
    """One bucket's static inputs (the padded batch and the negatives) and its graph."""

    def __init__(self, step: PreTrainingStep, rows: int, width: int, chars: int) -> None:
        self.step, self.rows, self.width = step, rows, width
        device = step.device
        self.input_ids = torch.zeros(rows, width, chars, dtype=torch.long, device=device)
        self.mask = torch.zeros(rows, width, dtype=torch.bool, device=device)
        self.labels = torch.full((rows, width), -100, dtype=torch.long, device=device)
        count = max(step.model.config.num_sampled_negatives, 1)
        self.sampled = [torch.zeros(count, dtype=torch.long, device=device) for _ in range(2)]
        self.floats = [torch.zeros(count + 1, dtype=torch.float64, device=device) for _ in range(2)]
        self.graph: torch.cuda.CUDAGraph | None = None
        self.loss: torch.Tensor | None = None

    def load(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        labels: torch.Tensor,
        draws: Sequence[tuple[torch.Tensor, torch.Tensor]],
    ) -> None:
        """Copies a batch and its negatives into the static inputs (asynchronous from pinned memory)."""
        batch, words = attention_mask.shape
        self.input_ids.zero_()
        self.input_ids[:batch, :words].copy_(input_ids, non_blocking=True)
        self.mask.zero_()
        self.mask[:batch, :words].copy_(attention_mask, non_blocking=True)
        self.labels.fill_(-100)
        self.labels[:batch, :words].copy_(labels, non_blocking=True)
        pin = self.input_ids.is_cuda
        for (ids, floats), ids_buffer, floats_buffer in zip(draws, self.sampled, self.floats):
            ids_buffer.copy_(ids.pin_memory() if pin else ids, non_blocking=True)
            floats_buffer.copy_(floats.pin_memory() if pin else floats, non_blocking=True)

    def build(self) -> None:
        """Captures the step (on a CUDA device) after a warm-up run on a side stream, as PyTorch's capture needs."""
        if not self.step.capture or self.step.capture_failure is not None:
            return
        current = torch.cuda.current_stream(self.step.device)
        side = torch.cuda.Stream(self.step.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            self.step._step(self)
        current.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.step.pool):
                self.loss = self.step._step(self)
        except RuntimeError as error:  # a capture this torch or driver refuses: every bucket runs eagerly from now on
            self.step.capture_failure = error
            warnings.warn(
                f"CUDA graph capture of the training step failed ({str(error).splitlines()[0]}); the bucket "
                f"{(self.rows, self.width)} and the later ones run the padded step eagerly",
                stacklevel=3,
            )
            torch.cuda.synchronize(self.step.device)
            return
        self.graph = graph

    def run(self) -> None:
        if self.graph is None:
            self.loss = self.step._step(self)
        else:
            self.graph.replay()
