"""Which code runs ELMo's biLSTM: the one place a path is chosen, and the one registry of the paths.

`ElmoModel.forward` asks `lstm_path` once per call for the name of the path, takes its function from
`ALL_LSTM_FUNCTIONS` and calls it once, as transformers' models take their attention from `ALL_ATTENTION_FUNCTIONS`.
Every path is a function with one signature (`reference_lstm_forward`'s): the model, its character ids, the mask, the
carried state, the dropout and the token cache in; the token layer, the LSTM layers and the final state out.
`config.lstm_implementation` is the request (as transformers' `attn_implementation`, a run-time choice that
`save_pretrained` does not write); the path also depends on where and how the model runs. Every path computes the
same math as the readable layer of `modeling_elmo.py` (`tests/model/test_paths_differential.py` holds each one to
it); they differ in speed, memory and rounding.

The paths (`LSTM_PATHS`):

- `"reference"`: the readable padded loop of `ElmoBiLstmLayer`, one step per word (autograd records every step).
  Anywhere.
- `"packed"`: packed steps with a shrinking batch, each layer one autograd node with a hand-written backward
  (`lstm_training_kernel.py`). Anywhere; the choice whenever grad mode is on and the CPU kernels do not apply.
- `"cpu_kernels"`: the CPU inference path (`cpu_kernels.py`): words encoded once per distinct word, packed steps,
  oneDNN-prepacked weights where PyTorch has those operators (plain products otherwise). A CPU, nothing needing a
  gradient, no dropout.
- `"cpu_kernels_int8"`: the same with int8 copies of the large weights (`ElmoModel.quantize_weights("int8")`).
- `"cuda_graphs"`: the reference loop captured once per padded batch shape as a CUDA graph and replayed
  (`cuda_graphs.py`). CUDA, grad mode off, no carried state, no dropout.
- `"fused"`: as `"cuda_graphs"`, each step's elementwise work in two Triton kernels (`cuda_kernels.py`). Also needs
  Triton, weights and input of one dtype among float32, bfloat16 and float16, and no autocast.

What each `config.lstm_implementation` (`LSTM_IMPLEMENTATIONS`) runs, in four situations:

- A: a CPU, no gradient needed (grad mode off, or no parameter of the biLM and no carried state requires one: a
  frozen biLM under a head), no dropout;
- B: not A, grad mode on;
- C: CUDA, grad mode off, no carried state, no dropout;
- D: anything else with grad mode off (a carried state or dropout on CUDA, dropout on the CPU, other devices).

| requested | A | B | C | D |
|---|---|---|---|---|
| `"auto"` | `"cpu_kernels"` (`_int8` if quantized) | `"packed"` | `"fused"`, else `"cuda_graphs"` | `"reference"` |
| `"reference"` | `"reference"` | `"reference"` | `"reference"` | `"reference"` |
| `"packed"` | `"cpu_kernels"` (`_int8` if quantized) | `"packed"` | `"packed"` | `"packed"` |
| `"cuda_graphs"` | as `"auto"`, warned | as `"auto"`, warned | `"cuda_graphs"` | as `"auto"`, warned |
| `"fused"` | as `"auto"`, warned | as `"auto"`, warned | `"fused"`, else `"cuda_graphs"` warned | as `"auto"`, warned |

A requested path that cannot run warns once per process for each (request, reason) and names the path used.
Weights quantized to int8 run only on `"cpu_kernels_int8"`: any other situation is an
error (`quantize_weights(None)` first). Two choices stay inside a path, because they change speed only: whether the
CPU's products use prepacked oneDNN weights (`cpu_kernels.onednn_products_available`), and a fused step that fails
to compile on a GPU, after which that model's graphs take the reference step (`cuda_graphs.py` warns once).

Under `torch.compile` every call runs `"reference"`, whatever the request: the compiler traces the readable loop (and
its autograd) into one graph, where the fast paths' data-dependent steps (distinct words, packed steps, prepacked
weights checked against their sources) would break it. Weights quantized to int8 have no compiled path: compiling
such a model is an error.
"""

import warnings
from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, ClassVar, cast

import torch
from torch import nn

from .configuration_elmo import LSTM_IMPLEMENTATIONS
from .cpu_kernels import elmo_forward
from .cuda_graphs import graphed_bilstm_forward
from .cuda_kernels import fused_step_apply
from .weight_cache import forward_pass

if TYPE_CHECKING:
    from .modeling_elmo import ElmoModel

# A `(cell, hidden)` state, as `ElmoModel.forward` takes and returns it.
_LstmState = tuple[torch.Tensor, torch.Tensor]
# What every path returns: the token layer, the list of LSTM layers and the final `(cell, hidden)` state.
_PathOutput = tuple[torch.Tensor, list[torch.Tensor], _LstmState]
# A path: `reference_lstm_forward`'s signature (model, input_ids, mask, lstm_states, dropout, token_cache).
LstmFunction = Callable[
    ["ElmoModel", torch.Tensor, torch.Tensor, "_LstmState | None", float, "nn.Module | None"], _PathOutput
]

LSTM_PATHS = ("reference", "packed", "cpu_kernels", "cpu_kernels_int8", "cuda_graphs", "fused")

_WARNED: set[tuple[str, str]] = set()  # (request, reason) pairs already warned about in this process


def lstm_path(
    model: "ElmoModel", input_ids: torch.Tensor, lstm_states: _LstmState | None = None, dropout: float = 0.0
) -> str:
    r"""
    The path `ElmoModel` `model` runs its biLSTM on for this call (one of `LSTM_PATHS`).

    Args:
        model (`ElmoModel`): gives the request (`config.lstm_implementation`), the weights and their quantization.
        input_ids (`torch.Tensor`): the call's input, on the device the model runs on.
        lstm_states (optional tuple `(cell, hidden)`): the carried state, as for `ElmoModel.forward`.
        dropout (float): the call's LSTM dropout.

    Returns:
        the path's name.
    """
    if torch.compiler.is_compiling():
        if model.encoder.weight_quantization is not None:
            raise ValueError(
                f"weights quantized to {model.encoder.weight_quantization} do not run under torch.compile; "
                "compile the float32 model, or run the quantized one uncompiled"
            )
        return "reference"
    states = lstm_states if isinstance(lstm_states, (tuple, list)) else ()
    grad_mode = torch.is_grad_enabled()
    tensors = (*model.character_encoder.parameters(), *model.encoder.parameters(), *states)
    needs_grad = grad_mode and any(isinstance(tensor, torch.Tensor) and tensor.requires_grad for tensor in tensors)
    device = input_ids.device

    def fused_step_available() -> bool:  # asked only on a CUDA device
        # (The layers register their weights by name, `ElmoBiLstmLayer.WEIGHTS`, which the type checker cannot see.)
        recurrent_weight = cast(torch.Tensor, model.encoder.layers[0].recurrent_weight)
        like = torch.empty(0, dtype=recurrent_weight.dtype, device=device)
        return fused_step_apply(model.encoder, like)

    return resolve_lstm_path(
        model.config.lstm_implementation,
        device_type=device.type,
        weight_quantization=model.encoder.weight_quantization,
        grad_mode=grad_mode,
        needs_grad=needs_grad,
        dropout=dropout,
        stateful=lstm_states is not None,
        fused_step_available=fused_step_available,
    )


def resolve_lstm_path(
    implementation: str,
    device_type: str,
    weight_quantization: str | None = None,
    grad_mode: bool = False,
    needs_grad: bool = False,
    dropout: float = 0.0,
    stateful: bool = False,
    fused_step_available: Callable[[], bool] = lambda: False,
) -> str:
    r"""
    The tables of this module's docstring, as a function of the facts they read.

    Args:
        implementation (str): the request, one of `LSTM_IMPLEMENTATIONS`.
        device_type (str): `"cpu"`, `"cuda"`, ...
        weight_quantization (None or "int8"): as `ElmoModel.quantize_weights`.
        grad_mode (bool): `torch.is_grad_enabled()`.
        needs_grad (bool): grad mode is on and a parameter of the biLM or the carried state requires a gradient.
        dropout (float): the call's LSTM dropout.
        stateful (bool): a state is carried in.
        fused_step_available (callable returning bool): whether the fused Triton step can run on these weights and
            inputs (Triton installed, supported dtype, no autocast); asked only where it matters.

    Returns:
        one of `LSTM_PATHS`.
    """
    if implementation not in LSTM_IMPLEMENTATIONS:
        raise ValueError(f"lstm_implementation must be one of {LSTM_IMPLEMENTATIONS}, got {implementation!r}")
    cpu_kernels = device_type == "cpu" and not dropout and not needs_grad
    graphs = device_type == "cuda" and not grad_mode and not stateful and not dropout
    if graphs and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        graphs = False  # a forward inside someone else's capture runs eagerly
    if weight_quantization is not None and (implementation == "reference" or not cpu_kernels):
        raise ValueError(
            f"weights quantized to {weight_quantization} run only on a CPU, without gradients, dropout or "
            f"lstm_implementation='reference': they are for inference (got device {device_type}, grad mode "
            f"{'on' if needs_grad else 'off'}, lstm_implementation={implementation!r}); train the float32 model "
            "(quantize_weights(None) gives float32 weights from the int8 ones)"
        )

    def automatic() -> str:
        if cpu_kernels:
            return "cpu_kernels_int8" if weight_quantization == "int8" else "cpu_kernels"
        if grad_mode:
            return "packed"
        if graphs:
            return "fused" if fused_step_available() else "cuda_graphs"
        return "reference"

    if implementation == "auto":
        return automatic()
    if implementation == "reference":
        return "reference"
    if implementation == "packed":
        return automatic() if cpu_kernels else "packed"
    # "cuda_graphs" or "fused": graphs need a CUDA device, grad mode off, no state and no dropout.
    if not graphs:
        used = automatic()
        _warn_once(
            implementation,
            f"{device_type}, grad mode {'on' if grad_mode else 'off'}, "
            f"{'a carried state' if stateful else 'no state'}, dropout {dropout}",
            used,
        )
        return used
    if implementation == "fused" and not fused_step_available():
        _warn_once("fused", "no Triton, or a dtype or autocast the fused step does not take", "cuda_graphs")
        return "cuda_graphs"
    return implementation


def _warn_once(requested: str, reason: str, used: str) -> None:
    if (requested, reason) in _WARNED:
        return
    _WARNED.add((requested, reason))
    warnings.warn(
        f"lstm_implementation={requested!r} cannot run here ({reason}); running the {used!r} path",
        stacklevel=4,
    )


class ElmoLstmInterface(MutableMapping[str, LstmFunction]):
    r"""
    The LSTM paths by name: a mapping from each name of `LSTM_PATHS` to its function, all with the signature of
    `reference_lstm_forward`. As transformers' `AttentionInterface`: `ElmoLstmInterface.register(name, function)`
    adds or replaces a path for every instance, and `interface[name] = function` replaces one in this instance only.
    """

    _global_mapping: ClassVar[dict[str, LstmFunction]] = {}

    def __init__(self) -> None:
        self._local_mapping: dict[str, LstmFunction] = {}

    @classmethod
    def register(cls, name: str, function: LstmFunction) -> None:
        """Makes `function` the path `name` of every `ElmoLstmInterface`."""
        cls._global_mapping[name] = function

    def __getitem__(self, name: str) -> LstmFunction:
        if name in self._local_mapping:
            return self._local_mapping[name]
        return self._global_mapping[name]

    def __setitem__(self, name: str, function: LstmFunction) -> None:
        self._local_mapping[name] = function

    def __delitem__(self, name: str) -> None:
        del self._local_mapping[name]

    def __iter__(self) -> Iterator[str]:
        return iter({**self._global_mapping, **self._local_mapping})

    def __len__(self) -> int:
        return len(self._global_mapping.keys() | self._local_mapping.keys())

    def get_interface(self, name: str | None, default: LstmFunction) -> LstmFunction:
        """The function of path `name`; `default` when `name` is None. An unregistered name is a `KeyError` naming the
        registered ones."""
        if name is None:
            return default
        if name not in self:
            raise KeyError(f"LSTM path {name!r} is not registered in ElmoLstmInterface (registered: {list(self)})")
        return self[name]


def reference_lstm_forward(
    model: "ElmoModel",
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    lstm_states: _LstmState | None = None,
    dropout: float = 0.0,
    token_cache: nn.Module | None = None,
) -> _PathOutput:
    r"""
    The path `"reference"`, and the signature of every path: `ElmoModel`'s token layer, then the readable padded loop
    of `ElmoBiLstm`.

    Args:
        model (`ElmoModel`): supplies the modules and weights.
        input_ids (`(batch, words, max_characters_per_token)`): character ids.
        mask (`(batch, words)` bool): real words, right-padded.
        lstm_states (optional tuple `(cell, hidden)`): the state to continue from, as for `ElmoModel.forward`.
        dropout (float): dropout on every LSTM layer's input.
        token_cache (optional module `(n, chars)` -> `(n, projection_dim)`): encodes words instead of the character
            encoder (e.g. `ElmoTokenCache`).

    Returns:
        the token layer `(batch, words, projection_dim)`, the list of LSTM layers `(batch, words, 2 *
        projection_dim)` (0 at padded positions) and the final `(cell, hidden)` state.
    """
    return _encoder_forward(model, input_ids, mask, lstm_states, dropout, token_cache, "reference")


def packed_lstm_forward(
    model: "ElmoModel",
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    lstm_states: _LstmState | None = None,
    dropout: float = 0.0,
    token_cache: nn.Module | None = None,
) -> _PathOutput:
    """The path `"packed"`: the token layer, then packed steps with a hand-written backward
    (`lstm_training_kernel.py`). Arguments and result as `reference_lstm_forward`."""
    return _encoder_forward(model, input_ids, mask, lstm_states, dropout, token_cache, "packed")


def cpu_kernels_lstm_forward(
    model: "ElmoModel",
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    lstm_states: _LstmState | None = None,
    dropout: float = 0.0,
    token_cache: nn.Module | None = None,
) -> _PathOutput:
    """The paths `"cpu_kernels"` and `"cpu_kernels_int8"` (`cpu_kernels.elmo_forward`, which reads the weights'
    quantization from the model), the only paths with derived copies of the weights (`weight_cache.py`): each is
    checked once in the call. No dropout there (`lstm_path` picks them only without). Arguments and result as
    `reference_lstm_forward`."""
    # cpu_kernels' own word encoding has no word embedding: a model with one encodes words in its forward.
    if token_cache is None and model.character_encoder.word_embedding is not None:
        token_cache = model.character_encoder
    with forward_pass():  # the weights' derived copies are checked once in this call (weight_cache.py)
        return elmo_forward(model, input_ids, mask, lstm_states, token_cache)


def cuda_graphs_lstm_forward(
    model: "ElmoModel",
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    lstm_states: _LstmState | None = None,
    dropout: float = 0.0,
    token_cache: nn.Module | None = None,
) -> _PathOutput:
    """The path `"cuda_graphs"`: the token layer, then the reference loop replayed from CUDA graphs (no carried state,
    no dropout there: `lstm_path` picks it only without). Arguments and result as `reference_lstm_forward`."""
    token_layer = model.token_layer(input_ids, mask, token_cache)
    return token_layer, *graphed_bilstm_forward(model.encoder, token_layer, mask, "reference")


def fused_lstm_forward(
    model: "ElmoModel",
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    lstm_states: _LstmState | None = None,
    dropout: float = 0.0,
    token_cache: nn.Module | None = None,
) -> _PathOutput:
    """The path `"fused"`: as `"cuda_graphs"`, the graphs capturing the fused step of `cuda_kernels.py`. Arguments and
    result as `reference_lstm_forward`."""
    token_layer = model.token_layer(input_ids, mask, token_cache)
    return token_layer, *graphed_bilstm_forward(model.encoder, token_layer, mask, "fused")


def _encoder_forward(
    model: "ElmoModel",
    input_ids: torch.Tensor,
    mask: torch.Tensor,
    lstm_states: _LstmState | None,
    dropout: float,
    token_cache: nn.Module | None,
    implementation: str,
) -> _PathOutput:
    token_layer = model.token_layer(input_ids, mask, token_cache)  # (batch, words, projection_dim)
    lstm_layers, final_state = model.encoder(
        token_layer, mask, lstm_states, dropout=dropout, implementation=implementation
    )
    return token_layer, lstm_layers, final_state


ElmoLstmInterface.register("reference", reference_lstm_forward)
ElmoLstmInterface.register("packed", packed_lstm_forward)
ElmoLstmInterface.register("cpu_kernels", cpu_kernels_lstm_forward)
ElmoLstmInterface.register("cpu_kernels_int8", cpu_kernels_lstm_forward)
ElmoLstmInterface.register("cuda_graphs", cuda_graphs_lstm_forward)
ElmoLstmInterface.register("fused", fused_lstm_forward)

# The registry `ElmoModel.forward` takes its path from.
ALL_LSTM_FUNCTIONS = ElmoLstmInterface()
