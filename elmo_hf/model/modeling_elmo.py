"""PyTorch ELMo: character CNN -> highway -> projection -> bidirectional LSTM language model.

The model's math lives in this file and reads top to bottom: the building blocks (char CNN, highway, biLSTM, scalar
mix, task encoder, CRF, sampled softmax), the outputs, `ElmoPreTrainedModel`, `ElmoModel`, `ElmoForPreTraining` and
the task heads. The LSTM below is the plain reference path; its cell step is `lstm_cell.py`'s. The faster paths run
the same math: under autograd each layer's recurrence with a hand-written backward (`lstm_training_kernel.py`), on a
CPU without gradients the packed inference kernels (`cpu_kernels.py`), on a CUDA device without gradients this
file's loop replayed from CUDA graphs (`cuda_graphs.py`, `cuda_kernels.py`). `ElmoModel.forward` asks
`lstm_paths.py` which one runs (one table there), and their derived copies of the weights follow `weight_cache.py`'s
rule. Those modules never import this file.

Weights converted from the original TensorFlow files use PyTorch conventions (gate order i, f, g, o; no hidden
forget bias): every TensorFlow quirk is undone once, by the converter's key table (`convert_bilm_tf.py`).
"""

import functools
import importlib
import math
import os
import tempfile
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput
from transformers.utils import ModelOutput, can_return_tuple

from .char_ids import char_ids_to_word, distinct_rows
from .configuration_elmo import ElmoConfig
from .cpu_kernels import (
    FLOAT_LAYOUTS,
    gather_words,
    int8_linear,
    int8_products_available,
    quantize_rows,
    reverse_words_index,
)
from .cuda_kernels import fused_layer_forward
from .lstm_cell import clip, lstm_cell_step
from .lstm_paths import ALL_LSTM_FUNCTIONS, lstm_path, reference_lstm_forward
from .lstm_training_kernel import bilstm_training_forward
from .weight_cache import drop_copies


class ElmoInt8Linear(nn.Module):
    r"""
    A linear layer whose weight is int8 with one float32 scale per output row (`weight ~ weight_scale * weight_int8`,
    `ElmoModel.quantize_weights`), and a float32 bias; its product quantizes the input on the fly (`cpu_kernels.py`).
    For inference on a CPU: it has no gradient.

    Args:
        in_features (int), out_features (int): as `nn.Linear`'s.
    """

    # Buffers, registered in `__init__`.
    weight_int8: torch.Tensor
    weight_scale: torch.Tensor

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.register_buffer("weight_int8", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("weight_scale", torch.zeros(out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "ElmoInt8Linear":
        """The int8 form of the `nn.Linear` `linear` (its float weight is not kept)."""
        quantized = cls(linear.in_features, linear.out_features)
        quantized.weight_int8, quantized.weight_scale = quantize_rows(linear.weight)
        quantized.bias = nn.Parameter(linear.bias.detach().float(), requires_grad=linear.bias.requires_grad)
        return quantized

    def to_linear(self) -> nn.Linear:
        """An `nn.Linear` holding the dequantized weight (`weight_scale * weight_int8`) and the bias."""
        linear = nn.Linear(self.weight_int8.shape[1], self.weight_int8.shape[0])
        linear.weight = nn.Parameter(self.weight_int8.float() * self.weight_scale.unsqueeze(1))
        linear.bias = nn.Parameter(self.bias.detach().clone())
        return linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x `(n, in_features)` float32 -> `(n, out_features)`."""
        return int8_linear(self, x)


class ElmoHighway(nn.Module):
    """One highway layer: `gate * relu(transform(x)) + (1 - gate) * x`, with `gate = sigmoid(gate(x))`. With
    `int8`, its two products hold int8 weights (`ElmoInt8Linear`)."""

    def __init__(self, dim: int, int8: bool = False) -> None:
        super().__init__()
        linear: Callable[[int, int], nn.Module] = ElmoInt8Linear if int8 else nn.Linear
        self.transform = linear(dim, dim)
        self.gate = linear(dim, dim)

    def quantize_(self, mode: str | None) -> None:
        """Hold the two products' weights as int8 (`mode="int8"`) or as float32 (None, dequantized)."""
        for name in ("transform", "gate"):
            linear = getattr(self, name)
            if mode == "int8" and isinstance(linear, nn.Linear):
                setattr(self, name, ElmoInt8Linear.from_linear(linear))
            elif mode is None and isinstance(linear, ElmoInt8Linear):
                setattr(self, name, linear.to_linear())

    def forward(
        self, x: torch.Tensor, product: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None
    ) -> torch.Tensor:
        """x `(words, dim)` -> `(words, dim)`. `product(linear, x)`, when given, computes `linear(x)` another way (the
        CPU kernels' int8 weights)."""
        gate = torch.sigmoid(self.gate(x) if product is None else product(self.gate, x))
        transformed = self.transform(x) if product is None else product(self.transform, x)
        return gate * F.relu(transformed) + (1 - gate) * x


class ElmoCharacterEncoder(nn.Module):
    """Context-independent word representation from character ids: char CNN -> highway -> [word embedding] ->
    projection. The word embedding (`config.word_embedding_dim > 0`, ELMoForManyLangs) reads the last id of each
    row of `input_ids`."""

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__()
        # A parameter of this module (not an nn.Embedding) so that transformers initialises the whole encoder here.
        self.char_embedding = nn.Parameter(torch.empty(config.num_characters, config.char_embedding_dim))
        self.convolutions = nn.ModuleList(
            nn.Conv1d(config.char_embedding_dim, count, kernel_size=width) for width, count in config.filters
        )
        self.activation: Callable[[torch.Tensor], torch.Tensor] = (
            torch.relu if config.activation == "relu" else torch.tanh
        )
        int8 = getattr(config, "weight_quantization", None) == "int8"
        self.highways = nn.ModuleList(
            ElmoHighway(config.num_filters, int8=int8) for _ in range(config.num_highway_layers)
        )
        self.word_embedding = (
            nn.Embedding(config.word_embedding_vocab_size, config.word_embedding_dim, padding_idx=0)
            if config.word_embedding_dim
            else None
        )
        token_width = config.num_filters + config.word_embedding_dim
        # As in bilm-tf, the token representation is only projected when its width differs from projection_dim,
        # unless config.always_project_tokens (ELMoForManyLangs).
        self.projection = (
            nn.Linear(token_width, config.projection_dim)
            if token_width != config.projection_dim or config.always_project_tokens
            else None
        )

    # Set by `ElmoPreTrainedModel.gradient_checkpointing_enable` (transformers' `_set_gradient_checkpointing`).
    gradient_checkpointing = False
    _gradient_checkpointing_func: Callable[..., Any]

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """char_ids: (..., max_characters_per_token) [+ 1 word id with a word embedding] -> (..., projection_dim).
        With gradient checkpointing on, in training, the convolutions, highways and projection keep only their input
        `(words, chars, char_dim)` for the backward and run again there."""
        word_ids = None
        if self.word_embedding is not None:
            char_ids, word_ids = char_ids[..., :-1], char_ids[..., -1].reshape(-1)  # (..., chars), (words,)
        chars = self.embed(char_ids).flatten(0, -3)  # (words, chars, char_dim)
        if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
            token = self._gradient_checkpointing_func(self._encode_embedded, chars, word_ids)
        else:
            token = self._encode_embedded(chars, word_ids)
        return token.view(*char_ids.shape[:-1], -1)  # (..., projection_dim)

    def _encode_embedded(self, chars: torch.Tensor, word_ids: torch.Tensor | None) -> torch.Tensor:
        """chars (words, chars, char_dim), word_ids (words,) or None -> (words, projection_dim)."""
        return self.highway_and_project(self.convolve(chars), word_ids)

    def embed(self, char_ids: torch.Tensor) -> torch.Tensor:
        """char_ids (..., chars) -> (..., chars, char_dim); id 0 (padding) is the zero vector."""
        return F.embedding(char_ids, self.char_embedding, padding_idx=0)

    def convolve(self, chars: torch.Tensor, filter_weights: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        """chars (words, chars, char_dim) -> (words, num_filters): every filter bank, max over positions, activation.
        `filter_weights` (optional): each bank's weight `(count, char_dim, width)` to use instead of its own (e.g. a
        bfloat16 copy for bfloat16 `chars`); the result has the biases' dtype."""
        words, _, char_dim = chars.shape
        features = []
        for index, conv in enumerate(cast(Iterable[nn.Conv1d], self.convolutions)):
            weight = conv.weight if filter_weights is None else filter_weights[index]
            bias = conv.bias
            assert bias is not None  # the banks are built with biases
            # One matrix product over all windows of `width` characters (faster than conv1d on these shapes); the
            # Conv1d modules only hold the weights.
            count, _, width = weight.shape
            windows = chars.unfold(1, width, 1)  # (words, positions, char_dim, width)
            positions = windows.shape[1]
            responses = torch.mm(windows.reshape(words * positions, char_dim * width), weight.view(count, -1).t())
            responses = responses.view(words, positions, count)
            # The bias is the same at every position, so it is added after the max (rounding is monotonic: the same
            # result as adding it first, without a bias-sized copy per position).
            features.append(self.activation(responses.amax(dim=1).to(bias.dtype) + bias))
        return torch.cat(features, dim=-1)

    def highway_and_project(
        self,
        token: torch.Tensor,
        word_ids: torch.Tensor | None = None,
        product: Callable[[nn.Module, torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """token (words, num_filters) -> (words, projection_dim): the highway layers, the word embedding of `word_ids`
        (words,) appended when the model has one, then the projection. `product`: as for `ElmoHighway.forward`."""
        for highway in self.highways:
            token = highway(token, product)
        if self.word_embedding is not None:
            token = torch.cat([token, self.word_embedding(word_ids)], dim=-1)  # (words, num_filters + word_dim)
        return self.projection(token) if self.projection is not None else token


class ElmoBiLstmLayer(nn.Module):
    r"""
    One layer of ELMo's LSTM for both directions at once, with a projected, clipped output. For each direction and
    each word `x_t`:

        i, f, g, o = split(x_t W + h_{t-1} U + b)
        c_t = clip(sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g), cell_clip)
        h_t = clip((sigmoid(o) * tanh(c_t)) P, proj_clip)

    Direction 0 is forward, 1 backward (it reads each row's words reversed). Gates are in PyTorch order
    (input, forget, cell, output); `bias` includes the forget bias.

    Args:
        input_dim (int): width of the layer's input.
        lstm_dim (int): memory cell size.
        projection_dim (int): width of the projected output (and of the recurrent input).
        cell_clip (float or None): clip of the memory cell.
        proj_clip (float or None): clip of the projected output.
    """

    def __init__(
        self,
        input_dim: int,
        lstm_dim: int,
        projection_dim: int,
        cell_clip: float | None,
        proj_clip: float | None,
        weight_quantization: str | None = None,
    ) -> None:
        super().__init__()
        # Weights in the (in, out) layout of `x @ weight`: every product reads them as stored, where a transposed
        # view would make the small per-step products several times slower (or cost a copy per call).
        shapes = {  # (2, in, out)
            "input_weight": (2, input_dim, 4 * lstm_dim),  # W
            "recurrent_weight": (2, projection_dim, 4 * lstm_dim),  # U
            "projection_weight": (2, lstm_dim, projection_dim),  # P
        }
        for name, shape in shapes.items():
            if name == "projection_weight":  # (the parameters' order of the float32 layer: W, U, b, P)
                self.bias = nn.Parameter(torch.empty(2, 4 * lstm_dim))  # b
            if weight_quantization == "int8":  # `quantize_`: (2, out, in) int8 and (2, out) scales
                self.register_buffer(f"{name}_int8", torch.zeros(2, shape[2], shape[1], dtype=torch.int8))
                self.register_buffer(f"{name}_scale", torch.zeros(2, shape[2]))
            else:
                self.register_parameter(name, nn.Parameter(torch.empty(shape)))
        # Floats (or None) for `lstm_cell_step`, also under `torch.jit.script` (config files may hold integers).
        self.cell_clip = None if cell_clip is None else float(cell_clip)
        self.proj_clip = None if proj_clip is None else float(proj_clip)

    WEIGHTS = ("input_weight", "recurrent_weight", "projection_weight")
    # torch.jit.script (the ONNX export) compiles the layer's forward only, not this Python-side property.
    __jit_unused_properties__ = ["weight_quantization"]

    @property
    def weight_quantization(self) -> str | None:
        """ "int8" when the layer holds its weights as int8 (`quantize_`), else None."""
        return "int8" if "input_weight_int8" in self._buffers else None

    def quantize_(self, mode: str | None) -> None:
        r"""
        Hold W, U and P as int8 with one float32 scale per output row (`mode="int8"`: buffers `input_weight_int8`
        `(2, out, in)` and `input_weight_scale` `(2, out)`, ...; the float32 parameters are dropped), or as float32
        parameters again (None: the dequantized values `scale * int8`, not the weights quantized from). The bias
        stays float32.
        """
        if mode == self.weight_quantization:
            return
        for name in self.WEIGHTS:
            if mode == "int8":
                float_weight = self._parameters.pop(name)
                assert float_weight is not None  # every float32 weight is registered (`__init__`, `quantize_(None)`)
                values, scales = quantize_rows(float_weight.transpose(1, 2))
                self.register_buffer(f"{name}_int8", values)
                self.register_buffer(f"{name}_scale", scales)
            else:
                int8_values, int8_scales = self._buffers.pop(f"{name}_int8"), self._buffers.pop(f"{name}_scale")
                assert int8_values is not None and int8_scales is not None  # registered with the int8 weights
                weight = (int8_values.float() * int8_scales.unsqueeze(-1)).transpose(1, 2).contiguous()
                if name == "projection_weight":  # the float32 layer's order: W, U, b, P
                    self.register_parameter("bias", self._parameters.pop("bias"))
                self.register_parameter(name, nn.Parameter(weight))

    def input_gates(self, inputs: torch.Tensor) -> torch.Tensor:
        """Each direction's input share of the gates, `x W + b`: `(2, n, input_dim)` -> `(2, n, 4 * lstm_dim)`."""
        input_weight = self.input_weight  # registered by name (`WEIGHTS`), which the type checker cannot see
        assert isinstance(input_weight, torch.Tensor)  # (TorchScript compiles it to a cast, no check)
        return torch.baddbmm(self.bias.unsqueeze(1), inputs, input_weight)

    def forward(
        self, inputs: torch.Tensor, mask: torch.Tensor, cell: torch.Tensor, hidden: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        r"""
        Args:
            inputs (`(2, batch, words, input_dim)`): each direction's input, in the order it reads the words.
            mask (`(batch, words)` bool): real words, right-padded.
            cell (`(2, batch, lstm_dim)`), hidden (`(2, batch, projection_dim)`): the state before the first word.

        Returns:
            outputs `(2, batch, words, projection_dim)`, 0 at padded positions, and the state `(cell, hidden)` after
            each row's last word.
        """
        batch, words = mask.shape
        gate_inputs = self.input_gates(inputs.flatten(1, 2)).view(2, batch, words, -1)  # (2, batch, words, 4 * lstm)
        # The weights are registered by name (`WEIGHTS`), which the type checker cannot see; TorchScript compiles the
        # isinstance to a cast, no check.
        recurrent_weight, projection_weight = self.recurrent_weight, self.projection_weight
        assert isinstance(recurrent_weight, torch.Tensor) and isinstance(projection_weight, torch.Tensor)
        outputs: list[torch.Tensor] = []
        for step_gate_input, running in zip(gate_inputs.unbind(2), mask.t()):
            gates = torch.baddbmm(step_gate_input, hidden, recurrent_weight)  # (2, batch, 4 * lstm_dim)
            new_cell, memory = lstm_cell_step(gates, cell, self.cell_clip)
            new_hidden = clip(torch.bmm(memory, projection_weight), self.proj_clip)  # (2, batch, projection_dim)
            # Rows without a word at this step (padding) keep their state, so it ends after their last word.
            running = running.view(1, batch, 1)
            cell = torch.where(running, new_cell, cell)
            hidden = torch.where(running, new_hidden, hidden)
            outputs.append(torch.where(running, new_hidden, 0.0))
        return torch.stack(outputs, dim=2), (cell, hidden)  # outputs (2, batch, words, projection_dim)


class ElmoBiLstm(nn.Module):
    """ELMo's stacked bidirectional LSTM with optional residual connections between layers."""

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            ElmoBiLstmLayer(
                config.projection_dim,
                config.lstm_dim,
                config.projection_dim,
                config.cell_clip,
                config.proj_clip,
                weight_quantization=getattr(config, "weight_quantization", None),
            )
            for _ in range(config.num_lstm_layers)
        )
        self.use_skip_connections = config.use_skip_connections
        self.lstm_dim = config.lstm_dim
        self.projection_dim = config.projection_dim

    @property
    def weight_quantization(self) -> str | None:
        """ "int8" when the layers hold int8 weights (`ElmoModel.quantize_weights`), else None."""
        return cast(ElmoBiLstmLayer, self.layers[0]).weight_quantization if len(self.layers) else None

    # Set by `ElmoPreTrainedModel.gradient_checkpointing_enable` (transformers' `_set_gradient_checkpointing`).
    gradient_checkpointing = False
    _gradient_checkpointing_func: Callable[..., Any]

    def forward(
        self,
        inputs: torch.Tensor,
        mask: torch.Tensor,
        lstm_states: tuple[torch.Tensor, torch.Tensor] | None = None,
        dropout: float = 0.0,
        implementation: str = "reference",
    ) -> tuple[list[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        r"""
        Args:
            inputs (`(batch, words, projection_dim)`): the token representation of each word, 0 at padded positions.
            mask (`(batch, words)` bool): real words, right-padded.
            lstm_states (optional tuple `(cell, hidden)` of shapes `(layers, 2, rows, lstm_dim)` and
                `(layers, 2, rows, projection_dim)`): the state to start from; zeros when None. As in bilm-tf,
                `rows` may differ from `batch`: batch row i continues state row i, state rows past the batch are
                carried through unchanged, and batch rows past the state start from zeros.
            dropout (float): dropout probability on every layer's input (the residual adds the dropped input).
            implementation (str): the path (`lstm_paths.py`, which `ElmoModel.forward` asks): "reference" runs this
                readable loop; "packed" the same math on packed steps with a hand-written backward
                (`lstm_training_kernel.py`); "fused" this loop with each step's elementwise work in two Triton kernels
                (`cuda_kernels.py`, the step of the CUDA graphs' "fused" path). The ONNX export compiles
                `ElmoBiLstmLayer` with `torch.jit.script`: its forward must stay scriptable.

        With gradient checkpointing on, in training, each layer keeps only its input and initial state for the
        backward and runs again there (on either path; the dropout is drawn outside, once).

        Returns:
            a list with each layer's output `(batch, words, 2 * projection_dim)`, `[forward; backward]`, 0 at
            padded positions, and the final `(cell, hidden)` state in the shapes above with `max(batch, rows)` rows.
        """
        batch, words, _ = inputs.shape
        cells, hiddens, carried = self.initial_states(lstm_states, batch, inputs)  # (layers, 2, batch, dim)
        if implementation not in ("reference", "packed", "fused"):
            raise ValueError(f"ElmoBiLstm runs 'reference', 'packed' or 'fused', got {implementation!r}")
        checkpoint = (
            self._gradient_checkpointing_func
            if self.gradient_checkpointing and self.training and torch.is_grad_enabled()
            else None
        )
        if implementation == "packed":
            packed_outputs, packed_cells, packed_hiddens = bilstm_training_forward(
                self, inputs, mask, cells, hiddens, dropout, zero_state=lstm_states is None, checkpoint=checkpoint
            )
            return packed_outputs, self.final_states(packed_cells, packed_hiddens, carried)
        reverse_index = reverse_words_index(mask.sum(dim=1), words)  # (batch, words)
        # Direction 0 reads each row's words in order, direction 1 backwards.
        layer_input = torch.stack([inputs, gather_words(inputs, reverse_index)])  # (2, batch, words, projection_dim)

        layer_outputs: list[torch.Tensor] = []
        final_cells: list[torch.Tensor] = []
        final_hiddens: list[torch.Tensor] = []
        for index, layer in enumerate(cast(Iterable[ElmoBiLstmLayer], self.layers)):
            if dropout:
                layer_input = F.dropout(layer_input, dropout, training=True)
            # output: (2, batch, words, projection_dim); "fused": the same step, its elementwise work fused
            run_layer: Callable[..., tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]] = (
                functools.partial(fused_layer_forward, layer) if implementation == "fused" else layer
            )
            if checkpoint is None:
                output, (cell, hidden) = run_layer(layer_input, mask, cells[index], hiddens[index])
            else:
                run_flat = functools.partial(_flat_layer_forward, run_layer)
                output, cell, hidden = checkpoint(run_flat, layer_input, mask, cells[index], hiddens[index])
            if self.use_skip_connections and index > 0:
                output = output + layer_input
            # The backward outputs read back in word order: (batch, words, 2 * projection_dim).
            layer_outputs.append(torch.cat([output[0], gather_words(output[1], reverse_index)], dim=-1))
            final_cells.append(cell)
            final_hiddens.append(hidden)
            layer_input = output
        return layer_outputs, self.final_states(torch.stack(final_cells), torch.stack(final_hiddens), carried)

    def initial_states(
        self, lstm_states: tuple[torch.Tensor, torch.Tensor] | None, batch: int, like: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        r"""
        The state each layer starts from, and the rows of `lstm_states` past the batch.

        Args:
            lstm_states (optional tuple `(cell, hidden)`): as for `forward`.
            batch (int): rows of the batch.
            like (`torch.Tensor`): gives the dtype and device.

        Returns:
            cells `(layers, 2, batch, lstm_dim)`, hiddens `(layers, 2, batch, projection_dim)`, and the pair of state
            rows past the batch (None without `lstm_states`), which `final_states` appends unchanged.
        """
        num_layers = len(self.layers)
        if lstm_states is None:
            cells = like.new_zeros(num_layers, 2, batch, self.lstm_dim)
            hiddens = like.new_zeros(num_layers, 2, batch, self.projection_dim)
            return cells, hiddens, None
        cells, hiddens = self._checked_states(lstm_states, like)
        # bilm-tf's state variables are sized for the largest batch: a smaller batch reads and writes only the first
        # rows and leaves the others for later batches; a larger one starts its new rows from zeros.
        carried = (cells[:, :, batch:], hiddens[:, :, batch:])  # (layers, 2, rows - batch, dim)
        missing_rows = batch - cells.shape[2]
        if missing_rows > 0:
            cells = torch.cat([cells, cells.new_zeros(num_layers, 2, missing_rows, self.lstm_dim)], dim=2)
            hiddens = torch.cat([hiddens, hiddens.new_zeros(num_layers, 2, missing_rows, self.projection_dim)], dim=2)
        return cells[:, :, :batch], hiddens[:, :, :batch], carried

    @staticmethod
    def final_states(
        cells: torch.Tensor, hiddens: torch.Tensor, carried: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The returned `(cell, hidden)`: each batch row's final state `(layers, 2, batch, dim)`, then the carried rows
        of `initial_states`: `(layers, 2, max(batch, rows), dim)`."""
        if carried is not None and carried[0].shape[2]:
            cells = torch.cat([cells, carried[0]], dim=2)  # (layers, 2, rows, lstm_dim)
            hiddens = torch.cat([hiddens, carried[1]], dim=2)  # (layers, 2, rows, projection_dim)
        return cells, hiddens

    def _checked_states(self, lstm_states: object, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The `(cell, hidden)` pair of `lstm_states`, checked: any number of rows, the same in both."""
        if not isinstance(lstm_states, (tuple, list)) or len(lstm_states) != 2:
            raise ValueError("lstm_states must be a (cell, hidden) pair, as returned in ElmoModelOutput.lstm_states")
        cells, hiddens = lstm_states
        rows = cells.shape[2] if cells.dim() == 4 else "rows"
        expected_cells = (len(self.layers), 2, rows, self.lstm_dim)
        expected_hiddens = (len(self.layers), 2, rows, self.projection_dim)
        if tuple(cells.shape) != expected_cells or tuple(hiddens.shape) != expected_hiddens:
            raise ValueError(
                f"lstm_states must have shapes {expected_cells} and {expected_hiddens} (layers, directions, rows, "
                f"dim), got {tuple(cells.shape)} and {tuple(hiddens.shape)}"
            )
        return cells.to(like), hiddens.to(like)


def _flat_layer_forward(
    run_layer: Callable[..., tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]], *inputs: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`run_layer(*inputs)`'s `output, (cell, hidden)` as one flat tuple, as a checkpointed function returns them."""
    output, (cell, hidden) = run_layer(*inputs)
    return output, cell, hidden


class ElmoScalarMix(nn.Module):
    r"""
    The task-specific ELMo vector of the paper (eq. 1): `gamma * sum_j softmax(weights)_j * h_j` over the biLM's
    layers.

    Args:
        num_layers (int): layers to mix (`num_lstm_layers + 1` for an ELMo biLM).
        initial_weights (list of `num_layers` floats, optional): the un-normalised weights to start from; zeros
            (equal weights) when None.
        trainable (bool, defaults to True): learn the weights and gamma, or keep them at their initial values.
        do_layer_norm (bool, defaults to False): normalise each layer before mixing, with one mean and one
            variance over all features of the batch's real words.
        dropout (float, defaults to 0.0): dropout on the mixed vector.
        l2_coef (float, defaults to 0.0): coefficient of [`~ElmoScalarMix.l2_penalty`].
    """

    def __init__(
        self,
        num_layers: int,
        initial_weights: Sequence[float] | None = None,
        trainable: bool = True,
        do_layer_norm: bool = False,
        dropout: float = 0.0,
        l2_coef: float = 0.0,
    ) -> None:
        super().__init__()
        if initial_weights is None:
            initial_weights = [0.0] * num_layers
        if len(initial_weights) != num_layers:
            raise ValueError(f"initial_weights must have {num_layers} values (one per layer), got {initial_weights!r}")
        self.initial_weights = [float(weight) for weight in initial_weights]
        self.trainable = trainable
        self.weights = nn.Parameter(torch.tensor(self.initial_weights), requires_grad=trainable)
        self.gamma = nn.Parameter(torch.ones(1), requires_grad=trainable)
        self.do_layer_norm = do_layer_norm
        self.dropout = nn.Dropout(dropout)
        self.l2_coef = l2_coef

    @property
    def normalized_weights(self) -> torch.Tensor:
        """The layer weights after the softmax, shape `(num_layers,)`."""
        return torch.softmax(self.weights, dim=0)

    def l2_penalty(self) -> torch.Tensor:
        """`l2_coef * sum(weights ** 2)` on the un-normalised weights (a scalar tensor)."""
        return self.l2_coef * (self.weights**2).sum()

    def forward(self, layers: Sequence[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        r"""
        Args:
            layers (sequence of `num_layers` tensors of shape `(batch, words, dim)`): the layers to mix.
            mask (`torch.BoolTensor` of shape `(batch, words)`): real words; only used by `do_layer_norm`.

        Returns:
            `torch.FloatTensor` of shape `(batch, words, dim)`.
        """
        if len(layers) != len(self.initial_weights):
            raise ValueError(f"ElmoScalarMix was built for {len(self.initial_weights)} layers, got {len(layers)}")
        stacked = torch.stack(list(layers))  # (num_layers, batch, words, dim)
        if self.do_layer_norm:
            weight = mask.to(stacked.dtype)[None, :, :, None]  # (1, batch, words, 1)
            count = weight.sum() * stacked.shape[-1]
            mean = (stacked * weight).sum(dim=(1, 2, 3), keepdim=True) / count  # (num_layers, 1, 1, 1)
            variance = (((stacked - mean) * weight) ** 2).sum(dim=(1, 2, 3), keepdim=True) / count
            stacked = (stacked - mean) / torch.sqrt(variance + 1e-12)
        mixed = (self.normalized_weights[:, None, None, None] * stacked).sum(dim=0)  # (batch, words, dim)
        return self.dropout(self.gamma * mixed)


class ElmoTaskWordEmbedding(nn.Module):
    r"""
    A trainable embedding of the task vocabulary, looked up from character ids.

    Args:
        vocab (list of str): the words, row `i + 1` each; row 0 is the unknown word.
        dim (int): the embedding's width.
        lowercase (bool): lowercase each word before the lookup.
        word_dropout (float): while training, look each word up as the unknown word with this probability.
    """

    def __init__(self, vocab: Sequence[str], dim: int, lowercase: bool = True, word_dropout: float = 0.0) -> None:
        super().__init__()
        self.lowercase = lowercase
        self.word_dropout = word_dropout
        self.word_rows = {word: row for row, word in enumerate(vocab, start=1)}
        self.embedding = nn.Embedding(len(vocab) + 1, dim)

    @torch.compiler.disable
    def word_ids(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`(batch, words, chars)` character ids and their `(batch, words)` mask -> `(batch, words)` rows (0 for
        unknown words and padding); each distinct word is decoded once. A dictionary lookup of strings: under
        `torch.compile` it runs eagerly, between two graphs."""
        distinct, inverse = distinct_rows(input_ids[mask])  # (distinct, chars)
        rows = []
        for char_ids in distinct.tolist():
            word = char_ids_to_word(char_ids)
            rows.append(self.word_rows.get(word.lower() if self.lowercase else word, 0))  # 0: unknown
        ids = torch.tensor(rows, dtype=torch.long, device=input_ids.device)[inverse]  # (real words,)
        return torch.zeros(mask.shape, dtype=torch.long, device=input_ids.device).masked_scatter(mask, ids)

    def forward(self, input_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`(batch, words, chars)` character ids, `(batch, words)` bool mask -> `(batch, words, dim)`."""
        rows = self.word_ids(input_ids, mask)  # (batch, words)
        if self.training and self.word_dropout > 0:
            dropped = torch.rand(rows.shape, device=rows.device) < self.word_dropout
            rows = rows.masked_fill(dropped, 0)  # row 0: the unknown word
        return self.embedding(rows)

    @torch.no_grad()
    def load_vectors(self, vectors: Mapping[str, torch.Tensor]) -> int:
        """Copies `vectors` (a dict word -> 1-D tensor of the embedding's width) into the rows of the words it has;
        returns how many rows it set."""
        found = 0
        for word, row in self.word_rows.items():
            if word in vectors:
                self.embedding.weight[row] = vectors[word]
                found += 1
        return found


class ElmoTaskEncoder(nn.Module):
    r"""
    The paper's recipe (section 3.3) for using ELMo in a task model: each word becomes `[x_k; ELMo_k]`, where the
    context-independent `x_k` is the biLM's token layer and/or a trainable task word embedding
    (`config.task_word_vocab`) and `ELMo_k` is a learned mix of all the biLM's layers (`use_input_elmo`); then an
    optional task biLSTM, and optionally a second mix at the output, `[h_k; ELMo'_k]`. Without either mix it is the
    paper's baseline, the task model without ELMo. The biLM runs without gradients when `config.freeze_bilm`.
    """

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__()
        num_layers = config.num_lstm_layers + 1
        mix_options: dict[str, Any] = dict(
            initial_weights=config.scalar_mix_initial_weights,
            trainable=config.scalar_mix_trainable,
            do_layer_norm=config.scalar_mix_do_layer_norm,
            dropout=config.scalar_mix_dropout,
            l2_coef=config.scalar_mix_l2_coef,
        )
        self.input_mix = ElmoScalarMix(num_layers, **mix_options) if config.use_input_elmo else None
        self.output_mix = ElmoScalarMix(num_layers, **mix_options) if config.use_output_elmo else None
        self.task_words = (
            ElmoTaskWordEmbedding(
                config.task_word_vocab,
                config.task_word_embedding_dim,
                config.task_word_lowercase,
                config.task_word_dropout,
            )
            if config.task_word_vocab
            else None
        )
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.projection_dim = config.projection_dim
        self.freeze_bilm = config.freeze_bilm
        self.use_bilm_token_layer = config.use_bilm_token_layer
        input_size = (
            (config.projection_dim if config.use_bilm_token_layer else 0)
            + (config.hidden_size if config.use_input_elmo else 0)
            + (config.task_word_embedding_dim if self.task_words is not None else 0)
        )
        self.lstm: nn.LSTM | None
        if config.task_encoder_layers > 0:
            self.lstm = nn.LSTM(
                input_size,
                config.task_encoder_hidden_size,
                num_layers=config.task_encoder_layers,
                batch_first=True,
                bidirectional=True,
            )
            self.output_size = 2 * config.task_encoder_hidden_size
        else:
            self.lstm = None
            self.output_size = input_size
        if self.output_mix is not None:
            self.output_size += config.hidden_size

    def l2_penalty(self) -> torch.Tensor:
        """The scalar mixes' L2 terms, summed (a scalar tensor)."""
        return sum((mix.l2_penalty() for mix in (self.input_mix, self.output_mix) if mix is not None), torch.zeros(()))

    def forward(
        self,
        elmo: "ElmoModel",
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None = None,
        elmo_hidden_states: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        r"""
        Args:
            elmo ([`ElmoModel`]): the head's biLM.
            input_ids, attention_mask: as for [`ElmoModel`].
            elmo_hidden_states (`(batch, num_lstm_layers + 1, words, 2 * projection_dim)`, optional): the frozen
                biLM's `hidden_states` for these words, computed beforehand (stacked on dim 1); the biLM is then
                not run. Needs `attention_mask`, and `input_ids` too with task word embeddings.

        Returns:
            the features `(batch, words, output_size)`, 0 at padded positions, and the `(batch, words)` bool mask of
            real words.
        """
        if elmo_hidden_states is not None:
            mask = self._checked_precomputed(elmo, elmo_hidden_states, attention_mask)  # (batch, words)
            hidden_states = elmo_hidden_states.unbind(1)  # num_layers + 1 tensors (batch, words, 2 * projection_dim)
        else:
            mask = elmo.word_mask(input_ids, attention_mask)  # (batch, words)
            with torch.set_grad_enabled(torch.is_grad_enabled() and not self.freeze_bilm):
                # return_dict=True whatever the (shared) config says: this call needs the output's fields.
                output = elmo(input_ids, attention_mask=mask, output_hidden_states=True, return_dict=True)
            hidden_states = output.hidden_states
        parts = []  # x_k, then ELMo_k: each (batch, words, width)
        if self.task_words is not None:
            if input_ids is None:
                raise ValueError(
                    "input_ids is required with task word embeddings (config.task_word_vocab), also "
                    "beside elmo_hidden_states: the words are looked up from their character ids"
                )
            parts.append(self.task_words(input_ids, mask))
        if self.use_bilm_token_layer:
            parts.append(hidden_states[0][..., : self.projection_dim])  # the biLM's token layer
        if self.input_mix is not None:
            parts.append(self.input_mix(hidden_states, mask))
        features = self.dropout(torch.cat(parts, dim=-1))  # (batch, words, input_size)
        if self.lstm is not None:
            features = self._task_lstm(features, mask)  # (batch, words, 2 * task_encoder_hidden_size)
        if self.output_mix is not None:
            features = torch.cat([features, self.output_mix(hidden_states, mask)], dim=-1)
        return self.dropout(features) * mask.unsqueeze(-1), mask

    # torch.compile's graphs take neither packed sequences nor `nn.LSTM` (Dynamo refuses the module): compiled, the
    # task biLSTM runs eagerly, between two graphs.
    @torch.compiler.disable
    def _task_lstm(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The task biLSTM over each row's real words: `(batch, words, input_size)` -> `(batch, words, 2 *
        task_encoder_hidden_size)`, 0 at padding."""
        assert self.lstm is not None  # called only with a task biLSTM
        packed = nn.utils.rnn.pack_padded_sequence(
            features, mask.sum(dim=1).cpu(), batch_first=True, enforce_sorted=False
        )
        encoded, _ = self.lstm(packed)
        return nn.utils.rnn.pad_packed_sequence(encoded, batch_first=True, total_length=features.shape[1])[0]

    def _checked_precomputed(
        self, elmo: "ElmoModel", elmo_hidden_states: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """The `(batch, words)` bool mask for precomputed `elmo_hidden_states`, after checking both."""
        if not self.freeze_bilm:
            raise ValueError(
                "elmo_hidden_states: precomputed biLM layers need config.freeze_bilm=True (the biLM is "
                "not run, so it cannot be fine-tuned)"
            )
        config = elmo.config
        layers, width = config.num_lstm_layers + 1, 2 * config.projection_dim
        shape = tuple(elmo_hidden_states.shape)
        if len(shape) != 4 or shape[1] != layers or shape[3] != width:
            raise ValueError(
                f"elmo_hidden_states must have shape (batch, {layers}, words, {width}) (ElmoModel's hidden_states "
                f"stacked on dim 1), got {shape}"
            )
        if attention_mask is None or tuple(attention_mask.shape) != (shape[0], shape[2]):
            got = None if attention_mask is None else tuple(attention_mask.shape)
            raise ValueError(f"elmo_hidden_states needs attention_mask of shape {(shape[0], shape[2])}, got {got}")
        return attention_mask.bool()


class ElmoCrf(nn.Module):
    r"""
    A linear-chain CRF over tags: the score of a tag sequence `y` with emissions `e` is
    `start[y_1] + sum_t e_t[y_t] + sum_t transitions[y_t, y_{t+1}] + end[y_n]`.

    Args:
        num_tags (int): number of tags.
    """

    def __init__(self, num_tags: int) -> None:
        super().__init__()
        self.start_transitions = nn.Parameter(torch.zeros(num_tags))
        self.end_transitions = nn.Parameter(torch.zeros(num_tags))
        self.transitions = nn.Parameter(torch.zeros(num_tags, num_tags))  # [from, to]

    def log_likelihood(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        r"""
        Args:
            emissions (`(batch, steps, num_tags)`), tags (`(batch, steps)` ints), mask (`(batch, steps)` bool,
                left-aligned: each row's steps come first, every row has at least one).

        Returns:
            `(batch,)` log-probability of each row's tags.
        """
        batch = torch.arange(emissions.shape[0], device=emissions.device)
        tags = tags.masked_fill(~mask, 0)
        score = self.start_transitions[tags[:, 0]] + emissions[batch, 0, tags[:, 0]]
        log_partition = self.start_transitions + emissions[:, 0]  # (batch, num_tags)
        for step in range(1, emissions.shape[1]):
            active = mask[:, step]
            step_score = self.transitions[tags[:, step - 1], tags[:, step]] + emissions[batch, step, tags[:, step]]
            score = score + step_score * active
            # (batch, from, 1) + (from, to) + (batch, 1, to), summed over `from`.
            extended = torch.logsumexp(
                log_partition.unsqueeze(2) + self.transitions + emissions[:, step].unsqueeze(1), dim=1
            )  # (batch, num_tags)
            log_partition = torch.where(active.unsqueeze(1), extended, log_partition)
        last_tags = tags[batch, mask.sum(dim=1) - 1]
        score = score + self.end_transitions[last_tags]
        return score - torch.logsumexp(log_partition + self.end_transitions, dim=1)

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        r"""
        Viterbi decoding.

        Args:
            emissions (`(batch, steps, num_tags)`), mask (`(batch, steps)` bool, left-aligned).

        Returns:
            a list with each row's best tag sequence (a list of `mask[row].sum()` ints).
        """
        best = self.start_transitions + emissions[:, 0]  # (batch, num_tags)
        backpointers = []
        for step in range(1, emissions.shape[1]):
            candidates = best.unsqueeze(2) + self.transitions  # (batch, from, to)
            step_best, step_pointer = candidates.max(dim=1)  # (batch, to)
            active = mask[:, step].unsqueeze(1)
            best = torch.where(active, step_best + emissions[:, step], best)
            backpointers.append(step_pointer)
        best = best + self.end_transitions
        paths: list[list[int]] = []
        for row, length in enumerate(mask.sum(dim=1).tolist()):
            tag = int(best[row].argmax())
            path = [tag]
            for pointer in reversed(backpointers[: length - 1]):
                tag = int(pointer[row, tag])
                path.append(tag)
            paths.append(path[::-1])
        return paths


def decoded_tags(head: nn.Module, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""
    A token-classification head's [`~ElmoForTokenClassification.decode`] tags laid back on the words. Takes any head
    with that method, so that a head loaded with `trust_remote_code=True` from an older copy of this file works too.

    Args:
        head: the head whose `decode` tags the words (Viterbi with a CRF, argmax otherwise).
        logits (`(batch, words, num_labels)`): the `logits` of its output.
        mask (`(batch, words)` bool): the words to tag; each row's must be contiguous.

    Returns:
        `torch.LongTensor` of shape `(batch, words)`: each masked word's tag, -1 elsewhere.
    """
    tags = torch.full(mask.shape, -1, dtype=torch.long, device=logits.device)
    # decode gives each row's tags in word order, which is the order a boolean mask assigns them in.
    decode = cast(Callable[[torch.Tensor, torch.Tensor], list[list[int]]], head.decode)  # any head's method
    decoded = [tag for row in decode(logits, mask) for tag in row]
    tags[mask] = torch.tensor(decoded, dtype=torch.long, device=logits.device)
    return tags


def _left_align(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For a `(batch, words)` bool mask, the `(batch, words)` index that moves each row's True positions first (in
    order), and the left-aligned mask."""
    order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)  # (batch, words)
    aligned = torch.arange(mask.shape[1], device=mask.device) < mask.sum(dim=1, keepdim=True)
    return order, aligned


def _check_num_labels(config: ElmoConfig, head_name: str) -> int:
    if not config.num_labels:
        raise ValueError(f"{head_name} needs config.num_labels (or id2label), got num_labels={config.num_labels!r}")
    return config.num_labels


class ElmoLogUniformSampler:
    r"""
    Draws softmax negatives from the log-uniform (Zipfian) distribution over a vocabulary sorted by decreasing
    frequency, `P(k) = log((k + 2) / (k + 1)) / log(V + 1)`, without repeats, and reports each candidate's expected
    count as TensorFlow's `log_uniform_candidate_sampler(unique=True)` defines it: after `tries` draws,
    `1 - (1 - P(k)) ** tries`. Drawing all V classes includes each with probability 1 (expected count 1).

    Args:
        vocab_size (int): V.
    """

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        # On the CPU even when the model is built on the meta device (from_pretrained): this is no parameter.
        ids = torch.arange(vocab_size, dtype=torch.float64, device="cpu")
        self.log_probabilities = torch.log(torch.log1p(1.0 / (ids + 1.0)) / math.log(vocab_size + 1.0))  # (V,)

    def sample(self, num_sampled: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, int | None]:
        """Returns `num_sampled` distinct class ids `(num_sampled,)` and the number of draws it took."""
        if num_sampled == self.vocab_size:
            return torch.arange(self.vocab_size), None
        draws = torch.empty(0, dtype=torch.long)
        while True:
            uniform = torch.rand(2 * num_sampled, dtype=torch.float64, generator=generator)
            # Inverse CDF of the log-uniform distribution: floor((V + 1) ** u) - 1.
            new = (torch.exp(uniform * math.log(self.vocab_size + 1.0)).floor().long() - 1).clamp(
                0, self.vocab_size - 1
            )
            draws = torch.cat([draws, new])
            values, inverse = torch.unique(draws, return_inverse=True)
            if len(values) >= num_sampled:
                break
        # First draw of each distinct value, in drawing order; the num_sampled-th one ends the sampling.
        positions = torch.arange(len(draws))
        first_draw = torch.full((len(values),), len(draws)).scatter_reduce(0, inverse, positions, reduce="amin")
        first_draw = first_draw.sort().values[:num_sampled]
        return draws[first_draw], int(first_draw[-1]) + 1

    def log_expected_counts(self, ids: torch.Tensor, tries: int | None) -> torch.Tensor:
        """log of the expected count of each class in `ids` (any shape) after `tries` draws (None: all drawn)."""
        if tries is None:
            return torch.zeros(ids.shape, dtype=torch.float64)
        # 1 - (1 - p) ** tries, computed as -expm1(tries * log1p(-p)) to stay exact for tiny p.
        return torch.log(-torch.expm1(tries * torch.log1p(-torch.exp(self.log_probabilities[ids]))))


def elmo_sampled_softmax_loss(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    sampled: torch.Tensor,
    log_expected_targets: torch.Tensor,
    log_expected_sampled: torch.Tensor,
) -> torch.Tensor:
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
    # (N, S) in one product, the negatives' bias and correction added by it (the largest tensor of the loss: every
    # pass over it counts).
    sampled_logits = torch.addmm(bias[sampled] - log_expected_sampled, hidden, weight[sampled].T)
    # Accidental hits: the negatives are distinct, so a row's target is at most one of them.
    column_of_class = targets.new_full((weight.shape[0],), -1)
    column_of_class[sampled] = torch.arange(len(sampled), device=sampled.device)
    hit_columns = column_of_class[targets]  # (N,), -1 where the target is no negative
    hit_rows = (hit_columns >= 0).nonzero().squeeze(1)
    lowest = sampled_logits.new_tensor(torch.finfo(sampled_logits.dtype).min)
    sampled_logits.index_put_((hit_rows, hit_columns[hit_rows]), lowest)
    # Cross-entropy with the target in front of the negatives: log(sum(exp(all logits))) - target logit.
    all_logits = torch.logaddexp(target_logits, torch.logsumexp(sampled_logits, dim=1))  # (N,)
    return (all_logits - target_logits).mean()


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
            `cell` of shape `(num_lstm_layers, 2, rows, lstm_dim)` and `hidden` of shape
            `(num_lstm_layers, 2, rows, projection_dim)` (direction 0 is forward, 1 backward), where `rows` is
            `max(batch, rows of the lstm_states passed in)`: rows of a passed state past the batch are carried
            through unchanged. Pass it as `lstm_states` to the next call to continue each row where it stopped,
            as bilm-tf does.
    """

    last_hidden_state: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    lstm_states: tuple[torch.Tensor, torch.Tensor] | None = None


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

    loss: torch.Tensor | None = None
    forward_loss: torch.Tensor | None = None
    backward_loss: torch.Tensor | None = None
    forward_logits: torch.Tensor | None = None
    backward_logits: torch.Tensor | None = None
    last_hidden_state: torch.Tensor | None = None
    lstm_states: tuple[torch.Tensor, torch.Tensor] | None = None


_ElmoModelT = TypeVar("_ElmoModelT", bound="ElmoPreTrainedModel")
_ElmoBiLmT = TypeVar("_ElmoBiLmT", bound="ElmoModel")


class ElmoPreTrainedModel(PreTrainedModel):
    """Weight initialisation as bilm-tf trains from scratch, and the transformers plumbing."""

    config: ElmoConfig
    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    # `gradient_checkpointing_enable()` (and the Trainer's `gradient_checkpointing=True`) recompute the character
    # encoder and each biLSTM layer in the backward instead of keeping their activations, on every path that records
    # a gradient.
    supports_gradient_checkpointing = True
    # device_map="auto" keeps the biLM on one device: its faster paths read the character encoder's and the LSTM's
    # weights directly, not through the submodules' forward (where accelerate's hooks move inputs between devices).
    _no_split_modules = ["ElmoModel", "ElmoCharacterEncoder", "ElmoBiLstm"]
    # A language-model checkpoint (ElmoForPreTraining, e.g. elmo_hf.DEFAULT_MODEL) loads into the biLM and the
    # task heads without its softmax, silently.
    _keys_to_ignore_on_load_unexpected = [r"^lm_head\."]
    # transformers' tags for the cards of this model (every card also has "elmo"); `add_model_tags` adds more.
    model_tags = ["elmo", "elmo-hf"]

    def __init__(self, config: ElmoConfig, *inputs: Any, **kwargs: Any) -> None:
        super().__init__(config, *inputs, **kwargs)
        self.model_tags = list(type(self).model_tags)  # per model: `add_model_tags` appends in place

    def _init_weights(self, module: nn.Module) -> None:
        # transformers calls this for modules with parameters of their own, children before parents.
        if isinstance(module, ElmoCharacterEncoder):
            if not getattr(module.char_embedding, "_is_hf_initialized", False):
                embedding = torch.empty_like(module.char_embedding).uniform_(-1.0, 1.0)
                embedding[0] = 0.0  # id 0 is padding
                init.copy_(module.char_embedding, embedding)
            for conv, (width, _) in zip(cast(Iterable[nn.Conv1d], module.convolutions), self.config.filters):
                if self.config.activation == "relu":
                    init.uniform_(conv.weight, -0.05, 0.05)
                else:
                    init.normal_(conv.weight, 0.0, math.sqrt(1.0 / (width * self.config.char_embedding_dim)))
                init.zeros_(cast(torch.Tensor, conv.bias))  # the banks are built with biases
            for highway in cast(Iterable[ElmoHighway], module.highways):
                if isinstance(highway.gate, ElmoInt8Linear):
                    continue  # int8 weights come from their checkpoint
                transform, gate = cast(nn.Linear, highway.transform), cast(nn.Linear, highway.gate)  # float32 layers
                std = math.sqrt(1.0 / self.config.num_filters)
                init.normal_(transform.weight, 0.0, std)
                init.zeros_(transform.bias)
                init.normal_(gate.weight, 0.0, std)
                init.constant_(gate.bias, -2.0)  # starts close to the identity
            if module.projection is not None:
                init.normal_(module.projection.weight, 0.0, math.sqrt(1.0 / self.config.num_filters))
                init.zeros_(module.projection.bias)
        elif isinstance(module, ElmoBiLstmLayer) and module.weight_quantization is not None:
            return  # int8 weights come from their checkpoint
        elif isinstance(module, ElmoBiLstmLayer):
            # The float32 weights, registered by name (`ElmoBiLstmLayer.WEIGHTS`), which the type checker cannot see.
            input_weight, recurrent_weight, projection_weight = (
                cast(torch.Tensor, getattr(module, name)) for name in module.WEIGHTS
            )
            input_dim, four_lstm_dim = input_weight.shape[1:]
            bound = math.sqrt(6.0 / (input_dim + recurrent_weight.shape[1] + four_lstm_dim))
            init.uniform_(input_weight, -bound, bound)
            init.uniform_(recurrent_weight, -bound, bound)
            lstm_dim = four_lstm_dim // 4
            bias = torch.zeros(2, four_lstm_dim)
            bias[:, lstm_dim : 2 * lstm_dim] = 1.0  # forget gate bias of 1, as TensorFlow's LSTMCell
            init.copy_(module.bias, bias)
            projection_bound = math.sqrt(6.0 / (lstm_dim + projection_weight.shape[2]))
            init.uniform_(projection_weight, -projection_bound, projection_bound)
        elif isinstance(module, ElmoScalarMix):
            init.copy_(module.weights, torch.tensor(module.initial_weights))
            init.ones_(module.gamma)
        elif isinstance(module, ElmoTaskWordEmbedding):
            init.normal_(module.embedding.weight, 0.0, 1.0 / math.sqrt(module.embedding.embedding_dim))
        elif isinstance(module, ElmoCrf):
            init.zeros_(module.start_transitions)
            init.zeros_(module.end_transitions)
            init.zeros_(module.transitions)
        else:
            super()._init_weights(module)

    @classmethod
    def from_pretrained(
        cls: type[_ElmoModelT],
        pretrained_model_name_or_path: str | os.PathLike[str] | None,
        *model_args: Any,
        **kwargs: Any,
    ) -> _ElmoModelT:
        r"""
        `PreTrainedModel.from_pretrained`, made strict for ELMo checkpoints:

        - weights load from `model.safetensors` only: a pickle file (`pytorch_model.bin`) is never read, since
          unpickling can run code; `use_safetensors=False` is refused.
        - a config that contradicts its weights is an error naming the checkpoint, the parameter, its shape in
          the file and the shape the config expects (missing or surplus ELMo parameters likewise), instead of
          silently re-initialised weights. `ignore_mismatched_sizes=True` still allows other shapes in heads.
        - a corrupt weight file is an error naming it.
        """
        quantization_config = kwargs.get("quantization_config")
        if quantization_config is not None:
            raise ValueError(
                f"quantization_config={type(quantization_config).__name__}(...) cannot quantize ELMo's LSTM (its "
                "weights are not nn.Linear layers): load the float32 model and call quantize_weights('int8') (then "
                "save_pretrained writes an int8 checkpoint that loads as int8)"
            )
        if kwargs.get("use_safetensors") is False:
            raise ValueError(
                "ELMo checkpoints load from safetensors only (pickle files can run code): drop use_safetensors=False"
            )
        kwargs["use_safetensors"] = True
        return_loading_info = kwargs.pop("output_loading_info", False)
        allow_mismatched_heads = kwargs.get("ignore_mismatched_sizes", False)
        kwargs["ignore_mismatched_sizes"] = True  # mismatches are reported below, by name
        try:
            # transformers annotates the model alone as the result, also for output_loading_info=True.
            model, loading_info = cast(
                "tuple[_ElmoModelT, dict[str, Any]]",
                super().from_pretrained(pretrained_model_name_or_path, *model_args, output_loading_info=True, **kwargs),
            )
        except SafetensorError as error:
            raise OSError(
                f"{pretrained_model_name_or_path}: the weights are not a readable safetensors file ({error}); "
                "expected model.safetensors as written by save_pretrained"
            ) from error
        model._check_weights_match_config(pretrained_model_name_or_path, loading_info, allow_mismatched_heads)
        if model._head_over_a_bilm and any(name.startswith("classifier.") for name in loading_info["missing_keys"]):
            assert pretrained_model_name_or_path is not None  # a new head is built over a named biLM checkpoint
            model._record_bilm(pretrained_model_name_or_path)
        # Loading replaces parameters by new, trainable ones: freeze again what a head keeps fixed.
        model._apply_frozen_parameters()
        # As transformers' own from_pretrained, whose annotation names only the model: (model, loading_info) with
        # output_loading_info=True.
        return (model, loading_info) if return_loading_info else model  # type: ignore[return-value]

    # transformers wraps PreTrainedModel.push_to_hub with functools.wraps, which typeshed types as a callable object
    # that binds no `self` (no `__get__`): no method matches it, and calling it through `super()` wants the model as
    # its first argument. Both ignores below are for that stub.
    def push_to_hub(  # type: ignore[override]
        self,
        repo_id: str,
        *,
        commit_message: str | None = None,
        commit_description: str | None = None,
        private: bool | None = None,
        token: bool | str | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        max_shard_size: int | str | None = "50GB",
        tags: list[str] | str | None = None,
        card: dict[str, Any] | None = None,
    ) -> str:
        """transformers' `push_to_hub`, publishing elmo-hf's model card (`elmo_hf.hub.model_card`: the pipeline tag of
        this class, usage code, the biLM a head came from, architecture, citation) in the same commit as the weights,
        so that `revision` and `create_pr` hold for the card too (with `create_pr=True` main is untouched). A repo
        that already has an elmo-hf card keeps it (tags merged) unless `card` is given: the keyword arguments of
        `render_model_card` (e.g. `evaluation` from `model_card.evaluation_results`, `baseline`, `datasets`).
        Copies of this file loaded with `trust_remote_code` (no elmo-hf package) push with transformers' card."""
        hub_options: dict[str, Any] = dict(
            commit_message=commit_message,
            commit_description=commit_description,
            private=private,
            token=token,
            revision=revision,
            create_pr=create_pr,
            tags=tags,
        )
        if not self._has_elmo_hf_card:
            return super().push_to_hub(repo_id, max_shard_size=max_shard_size, **hub_options)  # type: ignore[arg-type]
        with tempfile.TemporaryDirectory() as folder:
            self.save_pretrained(folder, max_shard_size=max_shard_size)
            return self._publish_with_card(folder, repo_id, {}, card=card, **hub_options)

    def save_pretrained(
        self, save_directory: str | os.PathLike[str], *args: Any, push_to_hub: bool = False, **kwargs: Any
    ) -> str | None:
        """transformers' `save_pretrained`; with `push_to_hub=True` the upload carries elmo-hf's model card, as
        `push_to_hub` does (keyword arguments `repo_id`, `commit_message`, `commit_description`, `private`, `token`,
        `revision`, `create_pr`, `tags`, `card`), instead of transformers' generic one."""
        if not push_to_hub or not self._has_elmo_hf_card:
            # push_to_hub inside the keywords: beside `*args`, the type checker would count a named one twice.
            return super().save_pretrained(save_directory, *args, **{**kwargs, "push_to_hub": push_to_hub})

        names = ("commit_message", "commit_description", "private", "token", "revision", "create_pr", "tags", "card")
        hub_options = {name: kwargs.pop(name) for name in names if name in kwargs}
        repo_id = kwargs.pop("repo_id", None) or os.path.basename(os.path.normpath(os.fspath(save_directory)))
        os.makedirs(save_directory, exist_ok=True)
        timestamps = self._get_files_timestamps(save_directory)
        super().save_pretrained(save_directory, *args, **kwargs)
        return self._publish_with_card(save_directory, repo_id, timestamps, **hub_options)

    @property
    def _has_elmo_hf_card(self) -> bool:
        # Imported by name below: transformers refuses remote code whose import statements name missing packages.
        return type(self).__module__.startswith("elmo_hf.")

    def _publish_with_card(
        self,
        folder: str | os.PathLike[str],
        repo_id: str,
        timestamps: dict[str, float],
        *,
        commit_message: str | None = None,
        commit_description: str | None = None,
        private: bool | None = None,
        token: bool | str | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        tags: list[str] | str | None = None,
        card: dict[str, Any] | None = None,
    ) -> str:
        """Create `repo_id` when needed, write elmo-hf's README.md into `folder` and commit the files of `folder`
        changed since `timestamps` (all when empty) in one commit."""
        from huggingface_hub import HfApi

        model_card = importlib.import_module("elmo_hf.hub.model_card")
        repo_id = HfApi(token=token).create_repo(repo_id, private=private, exist_ok=True).repo_id
        all_tags = list(self.model_tags or [])
        for tag in [tags] if isinstance(tags, str) else tags or []:
            if tag not in all_tags:
                all_tags.append(tag)
        content = model_card.card_for_push(
            self, repo_id, token=token, revision=revision, tags=all_tags, folder=folder, **(card or {})
        )
        with open(os.path.join(folder, "README.md"), "w", encoding="utf-8") as card_file:
            card_file.write(content)
        return self._upload_modified_files(
            folder,
            repo_id,
            timestamps,
            commit_message=commit_message,
            token=token,
            create_pr=create_pr,
            revision=revision,
            commit_description=commit_description,
        )

    def _record_bilm(self, name_or_path: str | os.PathLike[str]) -> None:
        """Record in the config the biLM this new head was built on: a Hub repo id as given, a local folder by its
        name only (its path means nothing on another machine), for the model card's `base_model`."""
        source = os.fspath(name_or_path)
        self.config.bilm_name_or_path = os.path.basename(os.path.normpath(source)) if os.path.isdir(source) else source

    def quantize_weights(self: _ElmoModelT, mode: str | None = "int8") -> _ElmoModelT:
        """`ElmoModel.quantize_weights` on this model's biLM (a head's or the language model's); returns the model."""
        cast("ElmoModel", self.elmo).quantize_weights(mode)
        self._apply_frozen_parameters()
        return self

    # Whether `config.freeze_bilm` applies: a task head's setting. The language model trains its own biLM.
    _head_over_a_bilm = False

    def _apply_frozen_parameters(self) -> None:
        if self._head_over_a_bilm and self.config.freeze_bilm:
            self.elmo.requires_grad_(False)
        for module in self.modules():
            if isinstance(module, ElmoScalarMix):
                module.requires_grad_(module.trainable)

    def _check_weights_match_config(
        self, source: str | os.PathLike[str] | None, loading_info: Mapping[str, Any], allow_mismatched_heads: bool
    ) -> None:
        """Raise unless every ELMo parameter was loaded from the checkpoint with the shape the config gives it."""

        def is_elmo_parameter(
            name: str,
        ) -> bool:  # "encoder.layers.0.bias" in ElmoModel, "elmo.encoder.layers.0.bias" in a head
            return name.removeprefix(f"{self.base_model_prefix}.").startswith(_ELMO_SUBMODULES)

        for name, file_shape, expected_shape in sorted(_mismatched_keys(loading_info)):
            if is_elmo_parameter(name) or not allow_mismatched_heads:
                raise ValueError(
                    f"{source}: config.json contradicts model.safetensors: '{name}' has shape {tuple(file_shape)} in "
                    f"the weights, but the config expects {tuple(expected_shape)} (check {_config_fields_of(name)})"
                )
        state_dict = self.state_dict()
        missing = sorted(name for name in loading_info["missing_keys"] if is_elmo_parameter(name))
        if missing:
            raise ValueError(
                f"{source}: config.json contradicts model.safetensors: the weights lack '{missing[0]}' "
                f"(expected shape {tuple(state_dict[missing[0]].shape)}; check {_config_fields_of(missing[0])})"
            )
        surplus = sorted(name for name in loading_info["unexpected_keys"] if is_elmo_parameter(name))
        if surplus:
            raise ValueError(
                f"{source}: config.json contradicts model.safetensors: the weights hold '{surplus[0]}', which the "
                f"config has no place for (check {_config_fields_of(surplus[0])})"
            )


# The submodules of ElmoModel, and the config fields that shape each parameter, for load errors.
_ELMO_SUBMODULES = ("character_encoder.", "encoder.")
_CONFIG_FIELDS_BY_PARAMETER = {
    "char_embedding": "char_embedding_dim",
    "word_embedding": "word_embedding_vocab_size, word_embedding_dim",
    "convolutions": "filters, char_embedding_dim",
    "highways": "filters, num_highway_layers",
    "projection.": "filters, projection_dim",
    "encoder.layers": "lstm_dim, projection_dim, num_lstm_layers",
}


def _mismatched_keys(loading_info: Mapping[str, Any]) -> Collection[tuple[str, Sequence[int], Sequence[int]]]:
    """The `(name, shape in the file, shape the model expects)` triples of `from_pretrained`'s
    `loading_info["mismatched_keys"]`. transformers does not document that format
    (tests/model/test_transformers_contract.py pins it): a change is named here instead of misread."""
    entries: Any = loading_info.get("mismatched_keys")  # anything until checked below
    well_formed = entries is not None and all(
        isinstance(entry, tuple) and len(entry) == 3 and isinstance(entry[0], str) for entry in entries
    )
    if not well_formed:
        raise RuntimeError(
            "transformers changed the format of from_pretrained's loading_info['mismatched_keys'] (expected "
            f"(name, file shape, expected shape) triples, got {entries!r}): elmo-hf needs an update"
        )
    return entries


def _config_fields_of(parameter_name: str) -> str:
    for part, fields in _CONFIG_FIELDS_BY_PARAMETER.items():
        if part in parameter_name:
            return fields
    return "the config"


class ElmoModel(ElmoPreTrainedModel):
    r"""
    The ELMo biLM. Stateless by default: a sentence's output does not depend on its batch-mates, on padding
    or on earlier calls. bilm-tf's stateful behaviour is available through `lstm_states`.

    `torch.compile(model)` captures the forward in one graph (`fullgraph=True` holds): compiled, it runs the reference
    path of `lstm_paths.py` and skips the checks of the inputs' values (their shapes are still checked).
    """

    _can_compile_fullgraph = True

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__(config)
        self.character_encoder = ElmoCharacterEncoder(config)
        self.encoder = ElmoBiLstm(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        lstm_states: tuple[torch.Tensor, torch.Tensor] | None = None,
        lstm_dropout: float = 0.0,
        token_cache: nn.Module | None = None,
    ) -> ElmoModelOutput | tuple[torch.Tensor | tuple[torch.Tensor, ...], ...]:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, words, max_characters_per_token)`): character ids from
                [`ElmoTokenizer`]; a word of all zeros is padding.
            attention_mask (`torch.LongTensor` of shape `(batch, words)`, optional): 1 for words, 0 for padding,
                which must come after each row's words. Derived from `input_ids` when not given.
            output_hidden_states (bool, optional): also return every layer in `hidden_states`.
            lstm_states (tuple `(cell, hidden)`, optional): continue each row from this LSTM state (the
                `lstm_states` of the previous output) instead of from zeros. As in bilm-tf, the batch may be
                smaller or larger than the state: row i continues state row i, state rows past the batch are
                returned unchanged, and new rows start from zeros; the returned state has `max(batch, rows)` rows.
            lstm_dropout (float, defaults to 0.0): dropout on every LSTM layer's input, applied whatever the
                module's mode; [`ElmoForPreTraining`] passes `config.pretraining_dropout` while training.
            token_cache (module, optional): maps character ids `(..., max_characters_per_token)` to token vectors
                `(..., projection_dim)` in place of the character encoder, e.g. an [`ElmoTokenCache`] of known words
                (passed per call, so one model serves callers with and without a cache at once).
            return_dict (bool, optional): return an [`ElmoModelOutput`] (default) or a tuple.

        Returns:
            [`ElmoModelOutput`].
        """
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        if input_ids is None:
            raise ValueError("ElmoModel.forward: input_ids is required (character ids from ElmoTokenizer), got None")
        mask = self.word_mask(input_ids, attention_mask)  # (batch, words)
        # The one choice of path (lstm_paths.py): config.lstm_implementation, the device, grad mode, dropout, state.
        lstm_forward = ALL_LSTM_FUNCTIONS.get_interface(
            lstm_path(self, input_ids, lstm_states, lstm_dropout), reference_lstm_forward
        )
        token_layer, lstm_layers, final_state = lstm_forward(
            self, input_ids, mask, lstm_states, lstm_dropout, token_cache
        )

        hidden_states = (torch.cat([token_layer, token_layer], dim=-1), *lstm_layers)  # each (batch, words, 2*proj)
        return ElmoModelOutput(
            last_hidden_state=lstm_layers[-1],
            hidden_states=hidden_states if output_hidden_states else None,
            lstm_states=final_state,
        )

    def token_layer(
        self, input_ids: torch.Tensor, mask: torch.Tensor, token_cache: nn.Module | None = None
    ) -> torch.Tensor:
        r"""
        The context-independent representation of every word, as the LSTM paths start from.

        Args:
            input_ids (`(batch, words, max_characters_per_token)`): character ids.
            mask (`(batch, words)` bool): real words.
            token_cache (optional module `(n, chars)` -> `(n, projection_dim)`): encodes words instead of the
                character encoder.

        Returns:
            `(batch, words, projection_dim)`, 0 at padded positions.
        """
        encode_words = self.character_encoder if token_cache is None else token_cache
        if torch.compiler.is_compiling():
            # Compiled, every position is encoded, so that no shape depends on the values; padding is zeroed after.
            return encode_words(input_ids).masked_fill(~mask.unsqueeze(-1), 0.0)  # (batch, words, projection_dim)
        # Only the real words are encoded, each distinct one once (frequent words repeat); padding stays 0.
        distinct_words, word_index = distinct_rows(input_ids[mask])
        words = encode_words(distinct_words)[word_index]  # (real words, projection_dim)
        return words.new_zeros(*mask.shape, words.shape[-1]).masked_scatter(mask.unsqueeze(-1), words)

    def quantize_weights(self: _ElmoBiLmT, mode: str | None = "int8") -> _ElmoBiLmT:
        r"""
        Hold the large weights as int8, one float32 scale per output row, in place of their float32 values: the
        LSTM's W, U and P (`ElmoBiLstmLayer.quantize_`) and the highways' (`ElmoInt8Linear`). Their products run in
        int8 with inputs quantized on the fly, for one sentence at a time on a CPU, where they are memory-bound, and
        for batches; the character CNN's convolutions run in bfloat16 where oneDNN computes it (int8 is no faster on
        them), in float32 elsewhere; the token projection and the biases stay float32. The int8 tensors are the
        model's state: the float32 weights are freed, `save_pretrained` writes the int8 tensors and
        `config.weight_quantization = "int8"`, and `from_pretrained` of that folder builds the int8 model directly.
        For inference on a CPU, with a float32 model (`docs/speed.md` gives the speed and the deviation from
        float32); a forward that needs gradients is refused.

        Args:
            mode (str or None, defaults to "int8"): "int8", or None for float32 parameters holding the dequantized
                weights (`scale * int8`: not the float32 weights quantized from; reload those for exact float32).

        Returns:
            the model.
        """
        if mode not in (None, "int8"):
            raise ValueError(f"quantize_weights mode must be 'int8' or None, got {mode!r}")
        if mode == self.encoder.weight_quantization:
            return self
        if mode == "int8":
            if not int8_products_available():
                raise ValueError(
                    "int8 weights need PyTorch's x86/fbgemm quantized engine, which this CPU or PyTorch build "
                    f"lacks (engines: {torch.backends.quantized.supported_engines}); run in float32 or bfloat16"
                )
            if self.dtype != torch.float32 or self.device.type != "cpu":
                raise ValueError(f"int8 weights need a float32 model on a CPU, got {self.dtype} on {self.device}")
        for layer in cast(Iterable[ElmoBiLstmLayer], self.encoder.layers):
            layer.quantize_(mode)
            if mode == "int8":  # the float32 weights' copies are no longer read: free them with the weights
                drop_copies(layer, [(name, layout) for name in layer.WEIGHTS for layout in FLOAT_LAYOUTS])
        for highway in cast(Iterable[ElmoHighway], self.character_encoder.highways):
            highway.quantize_(mode)
        self.config.weight_quantization = mode
        return self

    def word_mask(self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The `(batch, words)` bool mask of real words, after checking the inputs' shapes, values and padding side."""
        if input_ids is None:
            raise ValueError("input_ids is required")
        if not isinstance(input_ids, torch.Tensor) or input_ids.is_floating_point() or input_ids.dtype == torch.bool:
            described = input_ids.dtype if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
            raise TypeError(f"input_ids must be an integer tensor of character ids, got {described}")
        chars = self.config.max_characters_per_token
        width = chars + (1 if self.config.word_embedding_dim else 0)  # a word embedding's id ends each row
        if input_ids.dim() != 3 or input_ids.shape[-1] != width or input_ids.numel() == 0:
            raise ValueError(
                f"input_ids must have shape (batch, words, {width}) with at least one word (character ids from "
                f"ElmoTokenizer), got {tuple(input_ids.shape)}"
            )
        if attention_mask is not None and tuple(attention_mask.shape) != tuple(input_ids.shape[:2]):
            raise ValueError(
                f"attention_mask must have shape {tuple(input_ids.shape[:2])} (batch, words), "
                f"got {tuple(attention_mask.shape)}"
            )
        mask = (input_ids > 0).any(dim=-1) if attention_mask is None else attention_mask.bool()
        # The checks of the values read the data, which a compiled graph cannot branch on: torch.compile traces
        # without them (as transformers' models skip theirs), so a compiled model trusts its inputs.
        if not torch.compiler.is_compiling():
            self._check_values(input_ids, attention_mask, mask)
        return mask

    def _check_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, mask: torch.Tensor) -> None:
        """Raises unless the ids are in range, `attention_mask` is 0/1 and `mask` is right-padded."""
        chars = self.config.max_characters_per_token
        if input_ids.shape[-1] > chars:
            word_ids = input_ids[..., chars]
            if ((word_ids < 0) | (word_ids >= self.config.word_embedding_vocab_size)).any():
                raise ValueError(
                    f"input_ids' last column must hold word ids in 0..{self.config.word_embedding_vocab_size - 1}, "
                    f"got {int(word_ids[(word_ids < 0) | (word_ids >= self.config.word_embedding_vocab_size)][0])}"
                )
        out_of_range = (input_ids[..., :chars] < 0) | (input_ids[..., :chars] >= self.config.num_characters)
        if out_of_range.any():
            sentence, word, char = out_of_range.nonzero()[0].tolist()
            raise ValueError(
                f"input_ids must hold character ids in 0..{self.config.num_characters - 1}, got "
                f"{int(input_ids[sentence, word, char])} at sentence {sentence}, word {word}, character {char}"
            )
        if attention_mask is not None and not ((attention_mask == 0) | (attention_mask == 1)).all():
            raise ValueError("attention_mask must hold only 0 (padding) and 1 (word)")
        lengths = mask.sum(dim=1, keepdim=True)
        if not torch.equal(mask, torch.arange(mask.shape[1], device=mask.device) < lengths):
            raise ValueError(
                "ElmoModel needs right padding: in every row the words must come first and the padding after "
                "(tokenize with padding_side='right')"
            )


class ElmoForPreTraining(ElmoPreTrainedModel):
    r"""
    The ELMo biLM with its language-model softmax: one softmax (`lm_head`, weight `(vocab_size, projection_dim)`
    and bias) shared by both directions. The forward direction predicts the next word from the top forward state,
    the backward direction the previous word from the top backward state; `loss = (forward_loss + backward_loss)
    / 2`. In training mode with `config.num_sampled_negatives > 0` the losses use a sampled softmax (log-uniform
    negatives, see [`ElmoLogUniformSampler`]); in eval mode always the full softmax.
    """

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__(config)
        if not config.vocab_size:
            raise ValueError("ElmoForPreTraining needs config.vocab_size > 0 (the size of the word vocabulary), got 0")
        self.elmo = ElmoModel(config)
        self.lm_head = nn.Linear(config.projection_dim, config.vocab_size)
        self.sampler = ElmoLogUniformSampler(config.vocab_size)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        lstm_states: tuple[torch.Tensor, torch.Tensor] | None = None,
        return_logits: bool = False,
    ) -> ElmoForPreTrainingOutput | tuple[torch.Tensor | tuple[torch.Tensor, ...], ...]:
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
        dropout = self.config.pretraining_dropout if self.training else 0.0
        outputs = self.elmo(
            input_ids, attention_mask=attention_mask, lstm_states=lstm_states, lstm_dropout=dropout, return_dict=True
        )
        top = outputs.last_hidden_state  # (batch, W, 2 * projection_dim)
        if dropout:
            top = F.dropout(top, dropout, training=True)
        forward_states, backward_states = top.split(self.config.projection_dim, dim=-1)  # each (batch, W, proj)

        loss: torch.Tensor | None = None
        forward_loss: torch.Tensor | None = None
        backward_loss: torch.Tensor | None = None
        if labels is not None:
            if tuple(labels.shape) != tuple(top.shape[:2]):
                raise ValueError(
                    f"labels must have shape {tuple(top.shape[:2])} (batch, words), got {tuple(labels.shape)}"
                )
            bad = (labels != -100) & ((labels < 0) | (labels >= self.config.vocab_size))
            if not torch.compiler.is_compiling() and bad.any():  # compiled, the values are not checked
                raise ValueError(
                    f"labels must be word ids in [0, {self.config.vocab_size}) or -100, got {int(labels[bad][0])}"
                )
            assert input_ids is not None  # self.elmo refused None
            words = attention_mask.bool() if attention_mask is not None else (input_ids > 0).any(dim=-1)  # (batch, W)
            # Forward: the state at t predicts labels[t + 1]; backward: the state at t + 1 predicts labels[t].
            # A target counts only when the predicting position is a word (padded states are 0).
            forward_targets = labels[:, 1:].masked_fill(~words[:, :-1], -100)  # (batch, W - 1)
            backward_targets = labels[:, :-1].masked_fill(~words[:, 1:], -100)  # (batch, W - 1)
            forward_loss = self._direction_loss(forward_states[:, :-1], forward_targets)
            backward_loss = self._direction_loss(backward_states[:, 1:], backward_targets)
            loss = (forward_loss + backward_loss) / 2

        return ElmoForPreTrainingOutput(
            loss=loss,
            forward_loss=forward_loss,
            backward_loss=backward_loss,
            forward_logits=self.lm_head(forward_states) if return_logits else None,  # (batch, W, V)
            backward_logits=self.lm_head(backward_states) if return_logits else None,  # (batch, W, V)
            last_hidden_state=top,
            lstm_states=outputs.lstm_states,
        )

    def _init_weights(self, module: nn.Module) -> None:
        lm_head: nn.Linear = self.lm_head
        if module is lm_head:
            # bilm-tf's softmax init: normal with std 1 / sqrt(projection_dim), zero bias.
            init.normal_(lm_head.weight, 0.0, 1.0 / math.sqrt(self.config.projection_dim))
            init.zeros_(lm_head.bias)
        else:
            super()._init_weights(module)

    def _direction_loss(self, states: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean loss of `states` (batch, T, proj) predicting `targets` (batch, T), -100 not counted."""
        sampled_softmax = self.training and self.config.num_sampled_negatives > 0
        if torch.compiler.is_compiling() and not sampled_softmax:
            # The same mean over the counted targets, on every position: no shape depends on the values.
            logits = self.lm_head(states).flatten(0, 1)  # (batch * T, V)
            return F.cross_entropy(logits, targets.flatten(), ignore_index=-100)
        return self._counted_direction_loss(states, targets, sampled_softmax)

    # The sampler draws until it has enough distinct classes, a loop on the values: under torch.compile the sampled
    # loss runs eagerly, between two graphs.
    @torch.compiler.disable
    def _counted_direction_loss(
        self, states: torch.Tensor, targets: torch.Tensor, sampled_softmax: bool
    ) -> torch.Tensor:
        counted = targets != -100  # (batch, T)
        if not counted.any():
            raise ValueError("labels hold no target: every word to predict is -100")
        hidden, targets = states[counted], targets[counted]  # (N, proj), (N,)
        num_sampled = self.config.num_sampled_negatives
        if not sampled_softmax:
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


class ElmoForTokenClassification(ElmoPreTrainedModel):
    r"""
    ELMo for tagging (NER, POS, chunking): `[x_k; ELMo_k]` -> optional task biLSTM -> optional `[h_k; ELMo'_k]`
    -> linear classifier, with cross-entropy or, when `config.use_crf`, a CRF loss. The biLM is frozen unless
    `config.freeze_bilm=False`.
    """

    _head_over_a_bilm = True

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__(config)
        self.num_labels = _check_num_labels(config, "ElmoForTokenClassification")
        self.elmo = ElmoModel(config)
        self.task_encoder = ElmoTaskEncoder(config)
        self.classifier = nn.Linear(self.task_encoder.output_size, self.num_labels)
        self.crf = ElmoCrf(self.num_labels) if config.use_crf else None
        self.post_init()
        self._apply_frozen_parameters()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        elmo_hidden_states: torch.Tensor | None = None,
    ) -> TokenClassifierOutput | tuple[torch.Tensor, ...]:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, words, max_characters_per_token)`): character ids from
                [`ElmoTokenizer`].
            attention_mask (`torch.LongTensor` of shape `(batch, words)`, optional): 1 for words, 0 for padding.
            elmo_hidden_states (`torch.FloatTensor` of shape `(batch, num_lstm_layers + 1, words, 2 *
                projection_dim)`, optional): instead of `input_ids`, the frozen biLM's layers for these words,
                computed once (e.g. to train many heads on one dataset); needs `attention_mask`.
            labels (`torch.LongTensor` of shape `(batch, words)`, optional): the tag of each word, -100 where no
                tag is scored (sentence boundaries, padding). With a CRF, the scored words of a row must be
                contiguous (they are: boundaries and padding are at the ends).
            return_dict (bool, optional): return a [`TokenClassifierOutput`] (default) or a tuple.

        Returns:
            [`TokenClassifierOutput`] with `logits` of shape `(batch, words, num_labels)` (the CRF's emission
            scores when `use_crf`; decode them with [`~ElmoForTokenClassification.decode`]).
        """
        features, mask = self.task_encoder(self.elmo, input_ids, attention_mask, elmo_hidden_states)  # (b, w, size)
        logits = self.classifier(features)  # (batch, words, num_labels)
        loss: torch.Tensor | None = None
        if labels is not None:
            if tuple(labels.shape) != tuple(mask.shape):
                raise ValueError(
                    f"labels must have shape {tuple(mask.shape)} (batch, words), one per word of input_ids, "
                    f"got {tuple(labels.shape)}"
                )
            if self.crf is None:
                loss = F.cross_entropy(logits.reshape(-1, self.num_labels), labels.reshape(-1), ignore_index=-100)
            else:
                loss = self._crf_loss(logits, labels)
            loss = loss + self.task_encoder.l2_penalty()
        return TokenClassifierOutput(loss=loss, logits=logits)

    def _crf_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        assert self.crf is not None  # called with a CRF only
        scored = labels != -100  # (batch, words)
        if not torch.compiler.is_compiling() and not scored.any(dim=1).all():
            raise ValueError("with use_crf every row of labels needs at least one word that is not -100")
        order, aligned = _left_align(scored)
        emissions = gather_words(logits, order)  # (batch, words, num_labels)
        tags = labels.gather(1, order)  # (batch, words)
        return -self.crf.log_likelihood(emissions, tags, aligned).mean()

    def decode(self, logits: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        r"""
        The predicted tag of every scored word: Viterbi with a CRF, argmax otherwise.

        Args:
            logits (`(batch, words, num_labels)`): the `logits` of the output.
            mask (`(batch, words)` bool): the words to tag (e.g. `labels != -100`); each row's must be contiguous.

        Returns:
            a list with each row's tags for its masked words, in order.
        """
        order, aligned = _left_align(mask.bool())
        emissions = gather_words(logits, order)  # (batch, words, num_labels)
        if self.crf is not None:
            return self.crf.decode(emissions, aligned)
        return [row[: int(length)].tolist() for row, length in zip(emissions.argmax(-1), aligned.sum(dim=1))]


class ElmoForSequenceClassification(ElmoPreTrainedModel):
    r"""
    ELMo for sentence classification or regression: `[x_k; ELMo_k]` -> optional task biLSTM -> optional
    `[h_k; ELMo'_k]` -> max and mean pooling over the words -> linear classifier. The loss follows
    `config.problem_type` as in transformers: regression (MSE), single-label (cross-entropy) or multi-label
    (binary cross-entropy), guessed from `num_labels` and the labels' dtype when unset.
    """

    _head_over_a_bilm = True

    def __init__(self, config: ElmoConfig) -> None:
        super().__init__(config)
        self.num_labels = _check_num_labels(config, "ElmoForSequenceClassification")
        self.elmo = ElmoModel(config)
        self.task_encoder = ElmoTaskEncoder(config)
        self.classifier = nn.Linear(2 * self.task_encoder.output_size, self.num_labels)
        self.post_init()
        self._apply_frozen_parameters()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        elmo_hidden_states: torch.Tensor | None = None,
    ) -> SequenceClassifierOutput | tuple[torch.Tensor, ...]:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, words, max_characters_per_token)`): character ids from
                [`ElmoTokenizer`].
            attention_mask (`torch.LongTensor` of shape `(batch, words)`, optional): 1 for words, 0 for padding.
            elmo_hidden_states (`torch.FloatTensor` of shape `(batch, num_lstm_layers + 1, words, 2 *
                projection_dim)`, optional): instead of `input_ids`, the frozen biLM's layers for these words,
                computed once; needs `attention_mask`.
            labels (optional): `(batch,)` class ids (single-label), `(batch,)` or `(batch, 1)` floats (regression),
                or `(batch, num_labels)` 0/1 floats (multi-label).
            return_dict (bool, optional): return a [`SequenceClassifierOutput`] (default) or a tuple.

        Returns:
            [`SequenceClassifierOutput`] with `logits` of shape `(batch, num_labels)`.
        """
        features, mask = self.task_encoder(self.elmo, input_ids, attention_mask, elmo_hidden_states)  # (b, w, size)
        valid = mask.unsqueeze(-1)  # (batch, words, 1)
        maximum = features.masked_fill(~valid, torch.finfo(features.dtype).min).amax(dim=1)  # (batch, output_size)
        mean = features.sum(dim=1) / valid.sum(dim=1)  # (batch, output_size)
        logits = self.classifier(torch.cat([maximum, mean], dim=-1))  # (batch, num_labels)
        loss: torch.Tensor | None = None
        if labels is not None:
            loss = self._classification_loss(logits, labels) + self.task_encoder.l2_penalty()
        return SequenceClassifierOutput(loss=loss, logits=logits)

    def _classification_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self.config.problem_type is None:
            if self.num_labels == 1:
                self.config.problem_type = "regression"
            elif labels.dtype in (torch.long, torch.int):
                self.config.problem_type = "single_label_classification"
            else:
                self.config.problem_type = "multi_label_classification"
        if self.config.problem_type == "regression":
            return F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype).reshape(logits.shape[0]))
        if self.config.problem_type == "single_label_classification":
            return F.cross_entropy(logits, labels.reshape(-1))
        if tuple(labels.shape) != tuple(logits.shape):
            raise ValueError(
                f"multi-label labels must have shape {tuple(logits.shape)} (batch, num_labels), "
                f"got {tuple(labels.shape)}"
            )
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))


__all__ = [
    "ElmoModel",
    "ElmoPreTrainedModel",
    "ElmoModelOutput",
    "ElmoForPreTraining",
    "ElmoForPreTrainingOutput",
    "ElmoLogUniformSampler",
    "elmo_sampled_softmax_loss",
    "ElmoScalarMix",
    "ElmoForTokenClassification",
    "ElmoForSequenceClassification",
]
