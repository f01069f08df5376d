"""ELMo's biLSTM on a CUDA device without gradients, replayed from CUDA graphs.

On a GPU the reference recurrence of `modeling_elmo.py` launches about fifteen small kernels per step and layer, and
the host's launches set much of the speed (the GPU is idle for much of a batch's wall time: docs/speed.md). Here
the whole `ElmoBiLstm.forward` is captured once per padded batch shape as a CUDA graph and replayed: one launch per
batch (faster than the plain loop on sorted batches of 32, and more so on single sentences: docs/speed.md). It is the
same code and the same math; only the batch is padded to its shape's bucket (rows to a power of two, words to a
multiple of `WORD_BUCKET`), which the reference path's masks make invisible to the real rows (padding keeps no state
and outputs zeros). On the `"fused"` path (`lstm_paths.py`) the captured loop runs the fused step of
`cuda_kernels.py` (four kernels per step instead of about fifteen: with the split projection, faster than the
graphs of the reference step on sorted batches of 32 and on single sentences, docs/speed.md); should it
fail to compile, the model warns once and captures the reference step.

`ElmoModel.forward` runs it on the paths `"cuda_graphs"` and `"fused"` (`lstm_paths.py`: a CUDA input, grad mode
off, no carried state, no dropout). Graphs are kept per model and shape, at most `MAX_GRAPHS` of them, sharing one
memory pool per model and device (so replays of one model must not run concurrently on several streams). A graph
holds no copy of a weight: it reads the parameters' storage at every replay, so an in-place change of a weight (by
any writer) is read by the next replay, and a weight given new storage (a new device, dtype or address) is captured
again: the key holds every parameter's address and dtype. Should a capture fail, the model warns once and runs the
plain loop. On the CPU the same padding runs eagerly (`_PaddedBiLstm` without capture), so the tests check the padding
there too.
"""

import collections
import warnings
import weakref
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch.cuda import _POOL_HANDLE  # what `torch.cuda.graph_pool_handle()` returns

    from .modeling_elmo import ElmoBiLstm

# `ElmoBiLstm.forward`'s result: each layer's output, and the final `(cell, hidden)` state.
_BiLstmOutput = tuple[list[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
# A graph's key: padded rows and words, the input's dtype and device, inference mode, the autocast dtype, each
# parameter's (address, dtype), and the step.
_GraphKey = tuple[
    int, int, torch.dtype, torch.device, bool, torch.dtype | None, tuple[tuple[int, torch.dtype], ...], str
]

# Words per sentence are padded up to a multiple of this (fewer distinct graphs, a few padded steps each).
WORD_BUCKET = 8
# Graphs kept per model; the least recently used one goes first.
MAX_GRAPHS = 64

_GRAPHS: "weakref.WeakKeyDictionary[ElmoBiLstm, _GraphCache]" = weakref.WeakKeyDictionary()


def graphed_bilstm_forward(
    encoder: "ElmoBiLstm", inputs: torch.Tensor, mask: torch.Tensor, step: str = "reference"
) -> _BiLstmOutput:
    r"""
    `encoder(inputs, mask)` (an `ElmoBiLstm`, zero initial state, no dropout) replayed from the CUDA graph of its
    padded shape, captured at the first batch of that shape.

    Args:
        encoder (`ElmoBiLstm`): supplies the layers.
        inputs (`(batch, words, projection_dim)`): the token layer, 0 at padded positions.
        mask (`(batch, words)` bool): real words, right-padded.
        step (str): the step the graphs capture, `"reference"` or `"fused"` (`cuda_kernels.py`).

    Returns:
        as `ElmoBiLstm.forward`: each layer's output `(batch, words, 2 * projection_dim)` and the final `(cell,
        hidden)` state `(layers, 2, batch, dim)`, as new tensors (the graph's own are overwritten at the next replay).
    """
    batch, words, _ = inputs.shape
    rows = 1 << max(batch - 1, 0).bit_length()  # the next power of two
    width = -(-max(words, 1) // WORD_BUCKET) * WORD_BUCKET
    weights = tuple((parameter.data_ptr(), parameter.dtype) for parameter in encoder.parameters())
    # Tensors made under inference mode cannot be written outside it (nor the reverse), and a graph replays the casts
    # of the autocast it was captured under: one graph for each.
    device_type = inputs.device.type
    autocast = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
    cache = _GRAPHS.setdefault(encoder, _GraphCache())
    if cache.fused_failure is not None:
        step = "reference"
    key = (rows, width, inputs.dtype, inputs.device, torch.is_inference_mode_enabled(), autocast, weights, step)
    if cache.failure is not None:
        return encoder(inputs, mask, implementation="reference")
    padded = cache.graphs.get(key)
    if padded is None:
        try:
            padded = _PaddedBiLstm(encoder, rows, width, inputs, cache.pool(inputs.device), step)
        except Exception as error:
            if step == "fused":
                # Triton missing a piece, or a kernel this GPU cannot compile: this model's graphs take the reference
                # step from now on (a capture that fails for other reasons fails again there, and is handled below).
                cache.fused_failure = error
                warnings.warn(
                    f"the fused LSTM step failed ({str(error).splitlines()[0]}); this model's CUDA graphs run the "
                    f"reference step instead",
                    stacklevel=2,
                )
                return graphed_bilstm_forward(encoder, inputs, mask, "reference")
            if not isinstance(error, RuntimeError):
                raise
            # A capture this torch or driver refuses: the plain loop, said once.
            cache.failure = error
            warnings.warn(
                f"CUDA graph capture of the biLSTM failed ({str(error).splitlines()[0]}); this model runs the plain "
                f"loop instead (lstm_implementation='reference' does so without trying)",
                stacklevel=3,
            )
            return encoder(inputs, mask, implementation="reference")
        cache.graphs[key] = padded
        if len(cache.graphs) > MAX_GRAPHS:
            cache.graphs.popitem(last=False)  # after the capture: the pool always has a graph using it
    cache.graphs.move_to_end(key)
    return padded.run(encoder, inputs, mask)


class _GraphCache:
    """One model's graphs, least recently used first, and the memory pool they share per device. A pool lives and
    dies with its model's graphs: PyTorch frees a private pool once no graph uses it, and a capture into a freed pool
    fails, so pools are never shared between models."""

    def __init__(self) -> None:
        self.graphs: collections.OrderedDict[_GraphKey, _PaddedBiLstm] = collections.OrderedDict()
        self.pools: dict[torch.device, _POOL_HANDLE] = {}  # device -> graph pool handle
        # The error of a capture that failed: the model then runs the plain loop.
        self.failure: Exception | None = None
        # The error of the fused step (cuda_kernels.py): the graphs then run the reference step.
        self.fused_failure: Exception | None = None

    def pool(self, device: torch.device) -> "_POOL_HANDLE | None":
        if device.type != "cuda":
            return None
        if device not in self.pools:
            self.pools[device] = torch.cuda.graph_pool_handle()
        return self.pools[device]


class _PaddedBiLstm:
    """`ElmoBiLstm.forward` on a batch padded to `(rows, width)`, captured as a CUDA graph when `like` is on a CUDA
    device (run eagerly elsewhere), with the static input and output tensors the graph reads and writes."""

    # The outputs the graph writes (without a graph, those of the last eager run), which `run` copies from.
    outputs: _BiLstmOutput

    def __init__(
        self,
        encoder: "ElmoBiLstm",
        rows: int,
        width: int,
        like: torch.Tensor,
        pool: "_POOL_HANDLE | None" = None,
        implementation: str = "reference",
    ) -> None:
        self.implementation = implementation  # "fused" or "reference": `ElmoBiLstm.forward`'s step
        self.inputs = like.new_zeros(rows, width, like.shape[-1])  # (rows, width, projection_dim)
        self.mask = torch.zeros(rows, width, dtype=torch.bool, device=like.device)
        self.graph: torch.cuda.CUDAGraph | None = None
        if like.is_cuda:
            self.graph = self._capture(encoder, like.device, pool)
        else:  # the capture's first run, as on a GPU: a step that cannot run fails here, at construction
            encoder(self.inputs, self.mask, implementation=self.implementation)

    def _capture(
        self, encoder: "ElmoBiLstm", device: torch.device, pool: "_POOL_HANDLE | None"
    ) -> torch.cuda.CUDAGraph:
        # A first run outside the graph, on a side stream as PyTorch's capture needs: it loads the kernels and lets
        # cuBLAS make its workspace, so the capture records only the forward's own work.
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            encoder(self.inputs, self.mask, implementation=self.implementation)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            self.outputs = encoder(self.inputs, self.mask, implementation=self.implementation)
        return graph

    def run(self, encoder: "ElmoBiLstm", inputs: torch.Tensor, mask: torch.Tensor) -> _BiLstmOutput:
        batch, words, _ = inputs.shape
        self.inputs.zero_()
        self.inputs[:batch, :words] = inputs
        self.mask.zero_()
        self.mask[:batch, :words] = mask
        if self.graph is None:
            self.outputs = encoder(self.inputs, self.mask, implementation=self.implementation)
        else:
            self.graph.replay()
        layers, (cells, hiddens) = self.outputs
        # Copies: the next replay of any graph of the shared pool may overwrite these.
        return [layer[:batch, :words].clone() for layer in layers], (
            cells[:, :, :batch].clone(),
            hiddens[:, :, :batch].clone(),
        )
