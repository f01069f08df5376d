"""Which code runs ELMo's biLSTM: the one place a path is chosen.

`ElmoModel.forward` asks `lstm_path` once per call and runs the path it names. `config.lstm_implementation` is the
request (as transformers' `attn_implementation`); the path also depends on where and how the model runs. Every path
computes the same math as the readable layer of `modeling_elmo.py` (`tests/test_paths_differential.py` holds each
one to it); they differ in speed, memory and rounding.

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
"""

import warnings

import torch

from .configuration_elmo import LSTM_IMPLEMENTATIONS
from .cuda_kernels import fused_step_apply

LSTM_PATHS = ("reference", "packed", "cpu_kernels", "cpu_kernels_int8", "cuda_graphs", "fused")

_WARNED = set()  # (request, reason) pairs already warned about in this process


def lstm_path(model, input_ids, lstm_states=None, dropout=0.0):
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
    states = lstm_states if isinstance(lstm_states, (tuple, list)) else ()
    grad_mode = torch.is_grad_enabled()
    tensors = (*model.character_encoder.parameters(), *model.encoder.parameters(), *states)
    needs_grad = grad_mode and any(isinstance(tensor, torch.Tensor) and tensor.requires_grad for tensor in tensors)
    device = input_ids.device

    def fused_step_available():  # asked only on a CUDA device
        like = torch.empty(0, dtype=model.encoder.layers[0].recurrent_weight.dtype, device=device)
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
    implementation,
    device_type,
    weight_quantization=None,
    grad_mode=False,
    needs_grad=False,
    dropout=0.0,
    stateful=False,
    fused_step_available=lambda: False,
):
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
            f"lstm_implementation='reference' (got device {device_type}, lstm_implementation={implementation!r}); "
            "call quantize_weights(None) first"
        )

    def automatic():
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


def _warn_once(requested, reason, used):
    if (requested, reason) in _WARNED:
        return
    _WARNED.add((requested, reason))
    warnings.warn(
        f"lstm_implementation={requested!r} cannot run here ({reason}); running the {used!r} path",
        stacklevel=4,
    )
