"""ELMo's CPU inference path: the same math as `modeling_elmo.py`, arranged to run fast without gradients.

`ElmoModel.forward` runs `elmo_forward` below on the paths `"cpu_kernels"` and `"cpu_kernels_int8"` of
`lstm_paths.py` (CPU, nothing needs a gradient, no dropout); the reference path of `modeling_elmo.py` reads like the
paper, and `tests/model/test_kernels.py` and `tests/model/test_paths_differential.py` compare this path with it. Every
derived copy of a weight (prepacked float32 and bfloat16, packed int8 from a quantized model's own int8 weights,
bfloat16, transposed) is kept under the one rule of `weight_cache.py`. Each trick below keeps a gain the benchmarks
measured (`docs/speed.md`):

- words run once per distinct word: the char CNN, highway, projection and the first LSTM layer's input gates
  depend on the word alone (48% of the words of the benchmark's batches are distinct, so that work halves);
- the char CNN runs on cache-sized pieces of words (faster on the CNN than one product over all words);
- the LSTM runs on packed, time-major inputs with a shrinking batch: rows sorted longest first, so the rows still
  running at a step are a prefix of the batch and padding costs nothing (unsorted batches hold 2.16x more
  positions than words);
- the first layer's gate rows are picked step by step from the per-word table, so the largest tensor of a layer
  (up to 293 MB at the original size) is never made (more words/s on sorted batches with the per-word gates);
- the per-step products use weights prepacked once for oneDNN, with 2+ rows (at 32 rows the recurrent product and the
  projection take less time per step than a `baddbmm` that repacks the weight at every step);
- a single sentence (one row) projects with an (out, in) copy of the projection weight, which `bmm` streams faster
  than the (in, out) weight (at batch 1, at the medium and the original size).
"""

import functools
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Literal, cast, overload

import torch
from torch import nn

from .char_ids import distinct_rows
from .lstm_cell import clip, lstm_cell_step
from .packed_steps import PackedSteps
from .weight_cache import derived_copy

if TYPE_CHECKING:
    from .modeling_elmo import ElmoBiLstm, ElmoBiLstmLayer, ElmoCharacterEncoder, ElmoInt8Linear, ElmoModel

# How a layer's per-step products run (`_products_kind`).
_Products = Literal["int8", "onednn", "plain"]

# Largest char-CNN response computed at once (bytes): small enough to stay in a CPU cache (docs/speed.md).
CNN_RESPONSE_BYTES = 4 * 2**20


def elmo_forward(
    model: "ElmoModel",
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    lstm_states: tuple[torch.Tensor, torch.Tensor] | None = None,
    token_cache: nn.Module | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    r"""
    `ElmoModel`'s forward on the CPU without gradients.

    Args:
        model (`ElmoModel`): supplies the modules and weights.
        input_ids (`(batch, words, chars)`): character ids; mask (`(batch, words)` bool): real words, right-padded.
        lstm_states (optional tuple `(cell, hidden)`): as for `ElmoModel.forward`.
        token_cache (optional module `(n, chars)` -> `(n, projection_dim)`): encodes words instead of the character
            encoder (e.g. `ElmoTokenCache`).

    Returns:
        the token layer `(batch, words, projection_dim)`, the list of LSTM layers `(batch, words, 2 * projection_dim)`
        (0 at padded positions) and the final `(cell, hidden)` state.
    """
    if model.encoder.weight_quantization is not None and model.dtype != torch.float32:
        raise ValueError(f"int8 weights need a float32 model on a CPU, got {model.dtype}: call .float() first")
    if model.dtype == torch.bfloat16:
        warn_if_bfloat16_is_slow()
    # The character encoder runs once per distinct word of the batch (frequent words repeat a lot).
    distinct_words, distinct_index = distinct_rows(input_ids[mask])
    if token_cache is not None:
        word_embeddings = token_cache(distinct_words)  # (distinct words, projection_dim)
    else:
        word_embeddings = encode_words_in_pieces(
            model.character_encoder, distinct_words, model.encoder.weight_quantization
        )
    word_index = torch.zeros_like(mask, dtype=torch.long).masked_scatter(mask, distinct_index)  # (batch, words)
    token_layer = word_embeddings[word_index].masked_fill(~mask.unsqueeze(-1), 0.0)  # (batch, words, proj)
    lstm_layers, final_state = bilstm_forward(model.encoder, word_embeddings, word_index, mask.sum(dim=1), lstm_states)
    return token_layer, lstm_layers, final_state


def encode_words_in_pieces(
    character_encoder: "ElmoCharacterEncoder", char_ids: torch.Tensor, weight_quantization: str | None = None
) -> torch.Tensor:
    """`character_encoder(char_ids)`, `(words, chars)` -> `(words, projection_dim)`, with the CNN run on a few words at
    a time: the responses of its largest bank (filters x positions) stay near the size of a CPU cache (faster than
    one product over all words, whose responses reach ~100 MB: docs/speed.md). Under "int8" the highways' products
    use int8 weights, and the convolutions run in bfloat16 where oneDNN computes it (in float32 they took longer, and
    int8 products are no faster on their shapes: docs/speed.md)."""
    chars = character_encoder.embed(char_ids)  # (words, chars, char_dim)
    convolutions = cast("Iterable[nn.Conv1d]", character_encoder.convolutions)
    filter_weights: list[torch.Tensor] | None = None
    if weight_quantization == "int8" and chars.dtype == torch.float32 and _onednn_bfloat16_available():
        chars = chars.bfloat16()
        filter_weights = [_weight_copy(conv, "weight", "bfloat16") for conv in convolutions]
    positions = [chars.shape[1] - conv.kernel_size[0] + 1 for conv in convolutions]
    largest_responses = max(conv.out_channels * count for conv, count in zip(convolutions, positions))
    words_per_piece = max(1, CNN_RESPONSE_BYTES // (largest_responses * chars.element_size()))
    token = torch.cat(
        [character_encoder.convolve(piece, filter_weights) for piece in chars.split(words_per_piece)]
    )  # (words, filters)
    # Under "int8" the highways are `ElmoInt8Linear`s, which run their own int8 products.
    return character_encoder.highway_and_project(token)  # (words, projection_dim)


def bilstm_forward(
    encoder: "ElmoBiLstm",
    word_embeddings: torch.Tensor,
    word_index: torch.Tensor,
    lengths: torch.Tensor,
    lstm_states: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[list[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    r"""
    `ElmoBiLstm`'s forward from the representation of each distinct word.

    Args:
        encoder (`ElmoBiLstm`): supplies the layers.
        word_embeddings (`(distinct words, projection_dim)`): the representation of each distinct word.
        word_index (`(batch, words)`): the row of `word_embeddings` at each position, right-padded (any value at
            padding).
        lengths (`(batch,)`): valid words per row.
        lstm_states (optional tuple `(cell, hidden)`): as for `ElmoBiLstm.forward`.

    Returns:
        as `ElmoBiLstm.forward`: each layer's output `(batch, words, 2 * projection_dim)` and the final state.
    """
    batch, words = word_index.shape
    cells, hiddens, carried = encoder.initial_states(lstm_states, batch, word_embeddings)  # (layers, 2, batch, dim)
    # Each direction's words packed step by step (time-major), without the padding: the rows still running at step
    # 0, then at step 1, ... (rows sorted longest first).
    steps = PackedSteps(lengths, words)
    packed_words = steps.pack(word_index)  # (2, valid): each packed position's row of word_embeddings

    layer_outputs: list[torch.Tensor] = []
    final_cells: list[torch.Tensor] = []
    final_hiddens: list[torch.Tensor] = []
    layer_input: torch.Tensor | None = None  # the previous layer's packed output (2, valid words, projection_dim)
    for index, layer in enumerate(cast("Iterable[ElmoBiLstmLayer]", encoder.layers)):
        step_gate_inputs: Iterable[torch.Tensor]
        if index == 0:
            # The first layer's input depends on the word alone: its gate inputs are computed once per distinct
            # word, then picked for every position.
            gate_table = _input_gates(layer, word_embeddings.expand(2, -1, -1), encoder.weight_quantization)
            step_gate_inputs = (_pick_rows(gate_table, rows) for rows in packed_words.split(steps.batch_sizes, dim=1))
        else:
            assert layer_input is not None  # set by the layer before
            gate_inputs = _input_gates(layer, layer_input, encoder.weight_quantization)  # (2, valid, 4 * lstm_dim)
            step_gate_inputs = gate_inputs.split(steps.batch_sizes, dim=1)  # (2, active, 4 * lstm_dim) per step
        initial_state = (cells[index][:, steps.order], hiddens[index][:, steps.order])
        output, (cell, hidden) = packed_layer_forward(
            layer,
            step_gate_inputs,
            steps.batch_sizes,
            *initial_state,
            zero_state=lstm_states is None,
            weight_quantization=encoder.weight_quantization,
        )  # output: (2, valid words, projection_dim)
        if encoder.use_skip_connections and index > 0:
            assert layer_input is not None
            output = output + layer_input
        layer_outputs.append(steps.unpack(output))  # (batch, words, 2 * projection_dim), 0 at padded positions
        final_cells.append(cell)
        final_hiddens.append(hidden)
        layer_input = output

    cells_out = torch.stack(final_cells)[:, :, steps.restore]  # (layers, 2, batch, lstm_dim)
    hiddens_out = torch.stack(final_hiddens)[:, :, steps.restore]  # (layers, 2, batch, projection_dim)
    return layer_outputs, encoder.final_states(cells_out, hiddens_out, carried)


def packed_layer_forward(
    layer: "ElmoBiLstmLayer",
    step_gate_inputs: Iterable[torch.Tensor],
    batch_sizes: Sequence[int],
    cell: torch.Tensor,
    hidden: torch.Tensor,
    zero_state: bool = False,
    weight_quantization: str | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    r"""
    `ElmoBiLstmLayer`'s recurrence on packed steps with a shrinking batch.

    Args:
        layer (`ElmoBiLstmLayer`): supplies the weights and clips.
        step_gate_inputs (iterable of `(2, active, 4 * lstm_dim)`, one per step): each step's input share of the
            gates, bias included (`layer.input_gates`), for the rows still running (rows sorted longest first;
            backward rows reversed).
        batch_sizes (list of ints, one per step): rows still running at each step (a prefix of the batch).
        cell (`(2, batch, lstm_dim)`), hidden (`(2, batch, projection_dim)`): the initial state.
        zero_state (bool): the initial state is all zeros, so the first step has no recurrent term.
        weight_quantization (None or "int8"): "int8" runs the per-step products with the int8 weights `U` and `P`
            (`ElmoModel.quantize_weights`; the caller quantizes the input products, `_input_gates`).

    Returns:
        outputs `(2, words, projection_dim)` packed step by step, and the state `(cell, hidden)` after each row's
        last step.
    """
    outputs: list[torch.Tensor] = []
    ended_cells: list[torch.Tensor] = []
    ended_hiddens: list[torch.Tensor] = []
    for step, (active, step_gate_input) in enumerate(zip(batch_sizes, step_gate_inputs)):
        if step == 0:
            products = _products_kind(layer, step_gate_input, active, weight_quantization)
        if active < hidden.shape[1]:
            # Rows past their last word leave the batch; their state is final.
            ended_cells.append(cell[:, active:])
            ended_hiddens.append(hidden[:, active:])
            cell, hidden = cell[:, :active], hidden[:, :active]
        if step == 0 and zero_state:
            gates = step_gate_input  # hidden @ recurrent_weight is exactly 0
        else:
            gates = _gates(layer, step_gate_input, hidden, products)  # (2, active, 4 * lstm_dim)
        cell, memory = lstm_cell_step(gates, cell, layer.cell_clip)  # (2, active, lstm_dim)
        hidden = clip(_project(layer, memory, products), layer.proj_clip)  # (2, active, proj)
        outputs.append(hidden)

    # Rows that ended later sit earlier in the batch: put the ended pieces back in row order.
    final_cell = torch.cat([cell, *reversed(ended_cells)], dim=1)  # (2, batch, lstm_dim)
    final_hidden = torch.cat([hidden, *reversed(ended_hiddens)], dim=1)  # (2, batch, projection_dim)
    return torch.cat(outputs, dim=1), (final_cell, final_hidden)  # outputs (2, words, proj), packed step by step


def reverse_words_index(lengths: torch.Tensor, words: int) -> torch.Tensor:
    """`(batch, words)` index that reads each row's `lengths[row]` valid words backwards and keeps padded positions in
    place; it is its own inverse."""
    positions = torch.arange(words, device=lengths.device)
    lengths = lengths.unsqueeze(1)  # (batch, 1)
    return torch.where(positions < lengths, lengths - 1 - positions, positions)


def gather_words(sequence: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """sequence (batch, words, dim), index (batch, words) -> sequence[row, index[row, t]] (batch, words, dim)."""
    return sequence.gather(1, index.unsqueeze(-1).expand(-1, -1, sequence.shape[-1]))


def _pick_rows(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """table (2, rows, dim), index (2, n) -> table[direction, index[direction, i]] (2, n, dim)."""
    rows = table.shape[1]
    offsets = torch.arange(2, device=index.device).unsqueeze(1) * rows  # (2, 1): direction 1 reads the second half
    return table.reshape(2 * rows, -1).index_select(0, (index + offsets).flatten()).view(2, index.shape[1], -1)


def _input_gates(layer: "ElmoBiLstmLayer", inputs: torch.Tensor, weight_quantization: str | None) -> torch.Tensor:
    """`layer.input_gates(inputs)`, `(2, n, input_dim)` -> `(2, n, 4 * lstm_dim)`; with int8 weights under "int8",
    and in bfloat16 from oneDNN-prepacked weights where the per-step products use them (the input weight is streamed
    once per batch, as many bytes as the recurrent one: at one sentence it is the largest product after the per-step
    ones; bfloat16 `baddbmm` ran slower than the prepacked product at 26 rows, AMD EPYC, original size:
    docs/speed.md)."""
    if weight_quantization == "int8":
        return _int8_products(layer, "input_weight", inputs, layout="int8 with bias")  # b packed with W
    if inputs.dtype == torch.bfloat16 and _prepacked_products_apply(layer, inputs):
        return _prepacked_products(layer, "input_weight", inputs, bias=layer.bias)  # (2, n, 4 * lstm_dim)
    return layer.input_gates(inputs)


def _prepacked_products(
    layer: "ElmoBiLstmLayer", name: str, inputs: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """`inputs @ weight` (+ `bias` `(2, out)` when given) for both directions of `layer`'s weight `name` (`(2, in,
    out)`), from its oneDNN-prepacked copy: `(2, n, in)` -> `(2, n, out)`."""
    linear = torch.ops.mkldnn._linear_pointwise
    return torch.stack(
        [
            linear(inputs[direction], weight, None if bias is None else bias[direction], "none", [], "")
            for direction, weight in enumerate(_weight_copy(layer, name, "onednn"))
        ]
    )


def _int8_products(
    layer: "ElmoBiLstmLayer",
    name: str,
    inputs: torch.Tensor,
    plus: torch.Tensor | None = None,
    layout: Literal["int8", "int8 with bias"] = "int8",
) -> torch.Tensor:
    """`inputs @ weight` for both directions of `layer`'s int8 weight `name` (`name + "_int8"`, `(2, out, in)`),
    packed (with `layout="int8 with bias"`, packed with `layer.bias`, which it adds), with `plus` (`(2, n, out)`)
    added when given: `(2, n, in)` -> `(2, n, out)`."""
    reduce_range = _int8_reduce_range()
    weights = _weight_copy(layer, name, layout)
    if plus is None:
        return torch.stack([torch.ops.quantized.linear_dynamic(inputs[d], weights[d], reduce_range) for d in range(2)])
    # The sum is written straight into the result: one pass over each direction's output instead of two (an add,
    # then a stack), which made up most of int8's extra time over bfloat16 on sorted batches besides the CNN.
    result = inputs.new_empty(2, inputs.shape[1], plus.shape[-1])
    for direction, weight in enumerate(weights):
        output = torch.ops.quantized.linear_dynamic(inputs[direction], weight, reduce_range)
        torch.add(output, plus[direction], out=result[direction])
    return result


def _products_kind(
    layer: "ElmoBiLstmLayer", gate_input: torch.Tensor, rows: int, weight_quantization: str | None
) -> _Products:
    """How a layer's per-step products run: "int8" (when asked for), "onednn" (prepacked float32 weights, from 2 rows
    up in float32, from 1 row in bfloat16, where the CPU has them: `_prepacked_products_apply`) or "plain"
    (`baddbmm` / `bmm`)."""
    if weight_quantization == "int8":
        return "int8"
    if not _prepacked_products_apply(layer, gate_input):
        return "plain"
    # At one row float32's plain product streams the weight as fast; bfloat16's plain product is slow at any size.
    return "onednn" if rows > 1 or gate_input.dtype == torch.bfloat16 else "plain"


def _gates(
    layer: "ElmoBiLstmLayer", step_gate_input: torch.Tensor, hidden: torch.Tensor, products: _Products
) -> torch.Tensor:
    """`step_gate_input + hidden @ recurrent_weight`, both directions: `(2, active, 4 * lstm_dim)`."""
    if products == "int8":
        return _int8_products(layer, "recurrent_weight", hidden, plus=step_gate_input)
    if products == "plain" or (hidden.shape[1] == 1 and hidden.dtype == torch.float32):
        # One row: a matrix-vector product, memory-bound; the plain product streams the weight fastest.
        # (The tail of a sorted batch, where only its longest sentence still runs.) The cast: the layer registers its
        # weights by name (`ElmoBiLstmLayer.WEIGHTS`), which the type checker cannot see.
        return torch.baddbmm(step_gate_input, hidden, cast(torch.Tensor, layer.recurrent_weight))
    linear_plus_gate_input = torch.ops.mkldnn._linear_pointwise.binary
    return torch.stack(
        [
            linear_plus_gate_input(hidden[direction], step_gate_input[direction], weight, None, "add")
            for direction, weight in enumerate(_weight_copy(layer, "recurrent_weight", "onednn"))
        ]
    )  # (2, active, 4 * lstm_dim)


def _project(layer: "ElmoBiLstmLayer", memory: torch.Tensor, products: _Products) -> torch.Tensor:
    """`memory @ projection_weight`, both directions: `(2, active, lstm_dim)` -> `(2, active, projection_dim)`."""
    if products == "int8":
        return _int8_products(layer, "projection_weight", memory)
    if products == "onednn":
        return _prepacked_products(layer, "projection_weight", memory)  # (2, active, projection_dim)
    if memory.shape[1] == 1:
        # One sentence: a memory-bound product that `bmm` streams faster from an (out, in) copy of the weight
        # (docs/speed.md; the copy is 8 MB at the medium size, 34 MB at the original size).
        return torch.bmm(memory, _weight_copy(layer, "projection_weight", "transposed").transpose(1, 2))
    return torch.bmm(memory, cast(torch.Tensor, layer.projection_weight))


def _prepacked_products_apply(layer: "ElmoBiLstmLayer", gate_input: torch.Tensor) -> bool:
    r"""
    Whether the per-step products of `layer` can use weights prepacked for oneDNN (`_weight_copy`): weights and gate
    inputs both float32 (not under bf16 autocast), or both bfloat16 where oneDNN computes in bfloat16, on a CPU with
    oneDNN. In float32 the caller also requires more than one row at the first step.

    A product with a weight packed once runs faster on a CPU than a `bmm` that repacks the weight at every step
    (`docs/speed.md`). At one row the products are memory-bound and the plain ones are as fast, so a
    single sentence never builds the packed copy (168 MB at the original size): a process that embeds one sentence
    at a time does not hold it (only the projection weight's (out, in) copy, 34 MB there: `_project`).
    """
    recurrent_weight = cast(torch.Tensor, layer.recurrent_weight)  # registered by name (`ElmoBiLstmLayer.WEIGHTS`)
    dtype = recurrent_weight.dtype
    return (
        recurrent_weight.device.type == "cpu"
        and gate_input.dtype == dtype
        and (dtype == torch.float32 or (dtype == torch.bfloat16 and _onednn_bfloat16_available()))
        and onednn_products_available()
    )


def bfloat16_is_slow() -> bool:
    """Whether this CPU lacks bfloat16 products (no AVX512-BF16 or AMX, and no AVX-512 for oneDNN to emulate them: an
    AVX2 CPU), where a bfloat16 model runs many times slower than float32 (`docs/speed.md`)."""
    return not _onednn_bfloat16_available()


_BFLOAT16_WARNED: list[bool] = []


def bfloat16_warning() -> str:
    """The one line that says a bfloat16 model is slow on this CPU, and what to use instead."""
    return (
        f"bfloat16 on this CPU (capability {torch.backends.cpu.get_cpu_capability()}, no bfloat16 instructions) runs "
        "many times slower than float32: use float32, or int8 (quantize_weights('int8'), --quantize int8)"
    )


def warn_if_bfloat16_is_slow(report: Callable[[str], object] | None = None) -> None:
    """Warn once per process, in one line, when a bfloat16 model runs on a CPU without bfloat16 products (through
    `report(line)` when given, e.g. the command line's stderr; else `warnings.warn`)."""
    if not _BFLOAT16_WARNED and bfloat16_is_slow():
        _BFLOAT16_WARNED.append(True)
        if report is not None:
            report(bfloat16_warning())
        else:
            warnings.warn(bfloat16_warning(), stacklevel=4)


@functools.cache
def _onednn_bfloat16_available() -> bool:
    """Whether oneDNN computes bfloat16 products on this CPU (AVX-512 BF16, AMX, or their emulation on AVX-512):
    prepacked bfloat16 products then ran faster than `baddbmm` at one row and at 32 (AMD EPYC, original size's
    recurrent weight: docs/speed.md)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


@functools.cache
def onednn_products_available() -> bool:
    """Whether PyTorch's private oneDNN linear operators (`torch.ops.mkldnn._reorder_linear_weight`,
    `_linear_pointwise`), which the prepacked products use, exist in this PyTorch and agree with `torch.matmul`:
    probed once on small tensors. Without them the per-step products fall back to `baddbmm`/`bmm` (the same values,
    slower: docs/speed.md)."""
    if not torch.backends.mkldnn.is_available():
        return False
    generator = torch.Generator().manual_seed(0)
    rows, weight, other = (torch.randn(shape, generator=generator) for shape in ((3, 8), (8, 16), (3, 16)))
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight.t().contiguous(), 32)
        plus_other = torch.ops.mkldnn._linear_pointwise.binary(rows, other, packed, None, "add")
        plain = torch.ops.mkldnn._linear_pointwise(rows, packed, None, "none", [], "")
    except (AttributeError, RuntimeError, TypeError):
        return False
    expected = rows @ weight
    return torch.allclose(plain, expected, atol=1e-4) and torch.allclose(plus_other, expected + other, atol=1e-4)


@overload
def _weight_copy(layer: nn.Module, name: str, layout: Literal["onednn"]) -> tuple[torch.Tensor, ...]: ...
@overload
def _weight_copy(layer: nn.Module, name: str, layout: Literal["bfloat16", "transposed"]) -> torch.Tensor: ...
@overload
def _weight_copy(
    layer: nn.Module, name: str, layout: Literal["int8", "int8 with bias"]
) -> tuple[torch.ScriptObject, ...]: ...
@overload
def _weight_copy(layer: nn.Module, name: str, layout: Literal["int8 linear"]) -> torch.ScriptObject: ...
def _weight_copy(layer: nn.Module, name: str, layout: str) -> object:
    r"""
    A copy of the weight `name` of `layer` laid out for the per-step products: `"onednn"`, oneDNN's prepacked layout
    of a `(2, in, out)` float weight, one tensor per direction; `"bfloat16"`, a bfloat16 copy of any weight;
    `"transposed"`, `(2, out, in)`. From the int8 state of a quantized model (`name + "_int8"`, `(..., out, in)`, and
    `name + "_scale"`, `(..., out)`: `ElmoModel.quantize_weights`): `"int8"`, one weight per direction packed for
    `torch.ops.quantized.linear_dynamic` (`_int8_packed`), `"int8 with bias"` the same with the direction's row of
    `layer.bias` packed in, and `"int8 linear"` an `ElmoInt8Linear`'s weight with its bias.

    Made on first use and kept under `weight_cache.py`'s rule: made again whenever the values, dtype, shape or
    device of a tensor it was made from (the weight, or the int8 values, their scales and the packed bias) differ
    from those it was made from, however they were changed. Each copy costs the weight's size in memory.
    """
    if layout not in _LAYOUTS:
        raise ValueError(f"weight layout {layout!r}: expected one of {', '.join(map(repr, _LAYOUTS))}")
    if layout.startswith("int8"):
        values, scales = getattr(layer, f"{name}_int8"), getattr(layer, f"{name}_scale")
        # The float bias of an `ElmoBiLstmLayer` or an `ElmoInt8Linear` (a plain module's attribute to the checker).
        bias = None if layout == "int8" else cast(torch.Tensor, layer.bias)

        def build_int8() -> torch.ScriptObject | tuple[torch.ScriptObject, ...]:
            if layout == "int8 linear":
                return _int8_packed(values, scales, bias)
            rows = (None, None) if bias is None else bias
            return tuple(_int8_packed(*direction) for direction in zip(values, scales, rows))

        sources = (values, scales) if bias is None else (values, scales, bias)
        return derived_copy(layer, (name, layout), sources, build_int8)
    weight = getattr(layer, name)

    def build() -> tuple[torch.Tensor, ...] | torch.Tensor:
        values = weight.detach()
        if layout == "onednn":
            # (in, out) -> oneDNN's layout for `x @ weight`, tuned for batches of ~32 rows.
            reorder = torch.ops.mkldnn._reorder_linear_weight
            return tuple(reorder(direction.t().contiguous(), 32) for direction in values)
        if layout == "bfloat16":
            return values.bfloat16()
        return values.transpose(1, 2).contiguous()  # "transposed": (2, out, in)

    return derived_copy(layer, (name, layout), (weight,), build)


_LAYOUTS = ("onednn", "int8", "int8 linear", "int8 with bias", "bfloat16", "transposed")
# The copies of float weights, which a model quantized in place no longer reads (`ElmoModel.quantize_weights`).
FLOAT_LAYOUTS = ("onednn", "bfloat16", "transposed")


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""
    `weight` `(..., out, in)` as int8 with one scale per output row: symmetric, `weight ~ scale * int8`, the largest
    magnitude of each row at 127 (every value within half a step of its row's scale).

    Returns:
        the int8 values `(..., out, in)` and the float32 scales `(..., out)`.
    """
    weight = weight.detach().float()
    scales = (weight.abs().amax(dim=-1) / 127).clamp_min(1e-12)  # (..., out)
    values = torch.round(weight / scales.unsqueeze(-1)).clamp_(-127, 127).to(torch.int8)
    return values.contiguous(), scales.contiguous()


def _int8_packed(values: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None) -> torch.ScriptObject:
    r"""
    int8 `values` `(out, in)` with their `scales` `(out,)` (and `bias` `(out,)`), packed for
    `torch.ops.quantized.linear_dynamic` (fbgemm's int8 GEMM, the fastest int8 product on the CPUs measured:
    `docs/speed.md`). That operator quantizes its input to uint8 on the fly (one scale per call; 7 bits where the
    CPU needs it: `_int8_reduce_range`), multiplies in integers and returns float32. The values are wrapped as they
    are (`_make_per_channel_quantized_tensor`, no rounding: the model's int8 state is the weight), so a saved and
    reloaded model computes the same bits.
    """
    zero_points = torch.zeros(values.shape[0], dtype=torch.long)
    with warnings.catch_warnings():  # torch marks quantized tensors deprecated; the packing needs one (speed.md)
        warnings.simplefilter("ignore", UserWarning)
        weight = torch._make_per_channel_quantized_tensor(values.contiguous(), scales.double(), zero_points, 0)
    return torch.ops.quantized.linear_prepack(weight, None if bias is None else bias.detach().float())


def int8_linear(linear: "ElmoInt8Linear", inputs: torch.Tensor) -> torch.Tensor:
    """`linear(inputs)` for an `ElmoInt8Linear` (its int8 weight, scales and float bias): `(n, in)` -> `(n, out)`."""
    return torch.ops.quantized.linear_dynamic(
        inputs, _weight_copy(linear, "weight", "int8 linear"), _int8_reduce_range()
    )


# Values of fbgemm's `FBGEMM_ENABLE_INSTRUCTIONS` (upper-cased) that limit it to kernels without VNNI.
_FBGEMM_WITHOUT_VNNI = frozenset({"AVX2", "AVX512", "AVX512_256"})


@functools.cache
def _int8_reduce_range() -> bool:
    """Whether int8 products quantize their inputs to 7 bits instead of 8: needed where fbgemm multiplies uint8 by
    int8 with 16-bit intermediate sums (its AVX2 and AVX-512 kernels), which saturate at full range. Its AVX-512 VNNI
    kernels sum in 32 bits, so 8 bits are safe there and halve the deviation from float32. fbgemm has no kernels for
    AVX-VNNI (the 256-bit VNNI of CPUs without AVX-512), so those CPUs take 7 bits too. Read from /proc/cpuinfo, and
    from `FBGEMM_ENABLE_INSTRUCTIONS` where it limits fbgemm to AVX2 or AVX-512 kernels on a VNNI CPU (which is how
    docs/speed.md emulates those CPUs); 7 bits where the flags cannot be read."""
    if os.environ.get("FBGEMM_ENABLE_INSTRUCTIONS", "").strip().upper() in _FBGEMM_WITHOUT_VNNI:
        return True
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), [])
    except OSError:
        return True
    return "avx512_vnni" not in flags


@functools.cache
def int8_products_available() -> bool:
    """Whether this PyTorch has a CPU engine for int8 products (`x86` or `fbgemm`: CPUs with AVX2 or newer)."""
    engines = torch.backends.quantized.supported_engines
    return "x86" in engines or "fbgemm" in engines
