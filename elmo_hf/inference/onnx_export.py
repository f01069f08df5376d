r"""
ONNX export of the stateless `ElmoModel`, and `ElmoOnnxModel`, which runs the exported file on onnxruntime.

    elmo-hf export-onnx --model ./elmo-original --output ./elmo-onnx [--opset 17]

The file computes every layer of `ElmoModel(..., output_hidden_states=True)` with the zero initial state:

    inputs   input_ids       int64   (batch, words, max_characters_per_token)   character ids from ElmoTokenizer
             attention_mask  int64   (batch, words)                             1 for words, 0 for right padding
    output   hidden_states   float32 (num_lstm_layers + 1, batch, words, 2 * projection_dim)
             = torch.stack(hidden_states): layer 0 is the token layer [x; x], then each LSTM layer; 0 at padding

`batch` and `words` are dynamic axes. The graph is the plain reference path of `modeling_elmo.py` (not
`cpu_kernels.py`: PyTorch's exporter mishandles packed sequences, pytorch #49936, #48460). A traced Python loop
unrolls to the traced length, so each `ElmoBiLstmLayer` is compiled with `torch.jit.script`: its own loop over the
words becomes an ONNX `Loop`, and the rest is traced around it and exported by PyTorch's TorchScript-based
exporter (`dynamo=False`). The torch.export-based exporter would need the recurrence rewritten with a scan
operator, and the onnxscript package.

Limits: no `lstm_states` (every call starts from zeros, like `ElmoModel` without them), float32 only, one file
(a model of 2 GB or more would need ONNX external data). TorchScript is deprecated in PyTorch (2.13 warns, and this
module silences those warnings during the export): when it is removed, the export needs the scan rewrite above.
"""

import copy
import importlib
import io
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .. import __version__
from ..convert.convert_common import written_whole
from ..model.modeling_elmo import ElmoModel
from ..model.tokenization_elmo import ElmoTokenizer
from ..user_errors import UserInputError

ONNX_FILE = "model.onnx"
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "hidden_states"
DEFAULT_OPSET = 17
# Below 13 the exporter cannot type the loop's per-word inputs; its TorchScript-based exporter stops at 20.
SUPPORTED_OPSETS = range(13, 21)
# The export is checked against the reference path before it is saved (float32 rounding of a different schedule).
VERIFY_ATOL = 1e-4


class ElmoOnnxGraph(nn.Module):
    r"""
    What the exported file computes: `ElmoModel`'s reference path with the zero initial state, every layer out.

    Args:
        model (`ElmoModel`): supplies the modules and weights; it is not modified (the LSTM layers are copied).
    """

    def __init__(self, model):
        super().__init__()
        self.character_encoder = model.character_encoder
        self.encoder = copy.deepcopy(model.encoder)
        self.encoder.layers = nn.ModuleList(_ScriptedLstmLayer(layer) for layer in self.encoder.layers)

    def forward(self, input_ids, attention_mask):
        r"""
        Args:
            input_ids (`(batch, words, max_characters_per_token)` int64), attention_mask (`(batch, words)` int64).

        Returns:
            `(num_lstm_layers + 1, batch, words, 2 * projection_dim)`: every layer, as `ElmoModel`'s hidden_states.
        """
        batch, words, _ = input_ids.shape
        mask = attention_mask.bool()  # (batch, words)
        encoder = self.character_encoder
        # ElmoCharacterEncoder.forward's steps, with the ids flattened before the embedding rather than after it:
        # the exporter then knows the length of the character axis, which it needs to export `unfold`.
        chars = encoder.embed(input_ids.flatten(0, 1))  # (batch * words, chars, char_dim)
        token_layer = encoder.highway_and_project(encoder.convolve(chars)).view(batch, words, -1)
        token_layer = token_layer.masked_fill(~mask.unsqueeze(-1), 0.0)  # (batch, words, projection_dim)
        lstm_layers, _ = self.encoder(token_layer, mask, implementation="reference")  # each (batch, words, 2 * proj)
        return torch.stack([torch.cat([token_layer, token_layer], dim=-1), *lstm_layers])


class _ScriptedLstmLayer(nn.Module):
    """An `ElmoBiLstmLayer` compiled with `torch.jit.script`, so that its loop over words exports as an ONNX Loop."""

    def __init__(self, layer):
        super().__init__()
        self.layer = torch.jit.script(layer)

    def forward(self, inputs, mask, cell, hidden):
        output, state = self.layer(inputs, mask, cell, hidden)
        # The exporter loses the rank of the loop's stacked output; this view restores it for the ops after it.
        directions, batch, words, _ = inputs.shape
        return output.view(directions, batch, words, -1), state  # (2, batch, words, projection_dim)


def export_onnx(model, output_dir, opset=DEFAULT_OPSET):
    r"""
    Export `model` to `output_dir/model.onnx`, checked against the reference path on onnxruntime first; the folder
    also gets the model's config.json and the tokenizer's files.

    Args:
        model (`ElmoModel`): the biLM (float32). Its LSTM layers are compiled once more for the export; the model
            itself is left as it was.
        output_dir (str or `Path`): created when missing; its files appear together once all are written, and a
            failed export leaves it as it was (`convert_common.written_whole`).
        opset (int, defaults to `DEFAULT_OPSET`): the ONNX opset, in `SUPPORTED_OPSETS`.

    Returns:
        the `Path` of the written model.onnx.
    """
    onnx = _import("onnx")
    if not isinstance(model, ElmoModel):
        raise ValueError(f"model: export_onnx takes an ElmoModel, got {type(model).__name__}")
    if model.dtype != torch.float32:
        raise ValueError(f"model: dtype {model.dtype}, expected torch.float32 (the ONNX export is float32 only)")
    if opset not in SUPPORTED_OPSETS:
        raise UserInputError(
            f"--opset: {opset} is not supported, expected {SUPPORTED_OPSETS.start}..{SUPPORTED_OPSETS.stop - 1}"
        )
    if model.device.type != "cpu":
        raise ValueError(f"model: on {model.device}, expected the CPU (the export traces it there)")
    config = model.config
    traced_ids, traced_mask = example_inputs(config.max_characters_per_token, config.num_characters, [3, 2])
    with torch.no_grad(), warnings.catch_warnings():
        # TorchScript and its exporter are deprecated in favour of torch.export, which cannot keep the loop (above).
        warnings.filterwarnings(
            "ignore", message=r"(`torch\.jit\.|You are using the legacy TorchScript|The feature will be removed)"
        )
        warnings.filterwarnings("ignore", message="no signature found", category=UserWarning)
        graph = ElmoOnnxGraph(model).eval()
        traced = torch.jit.trace(graph, (traced_ids, traced_mask))
        buffer = io.BytesIO()
        torch.onnx.export(
            traced,
            (traced_ids, traced_mask),
            buffer,
            dynamo=False,
            opset_version=opset,
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "words"},
                "attention_mask": {0: "batch", 1: "words"},
                OUTPUT_NAME: {1: "batch", 2: "words"},
            },
        )
    onnx_model = onnx.load_from_string(buffer.getvalue())
    _drop_value_info(onnx_model.graph)
    # The exporter names the last axis symbolically; it is fixed.
    onnx_model.graph.output[0].type.tensor_type.shape.dim[3].dim_value = 2 * config.projection_dim
    metadata = {
        "elmo_hf_version": __version__,
        "max_characters_per_token": str(config.max_characters_per_token),
        "num_characters": str(config.num_characters),
        "num_layers": str(config.num_lstm_layers + 1),
        "hidden_size": str(2 * config.projection_dim),
    }
    for key, value in metadata.items():
        onnx_model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(onnx_model)
    _verify(graph, ElmoOnnxModel(onnx_model.SerializeToString()))

    serialized = onnx_model.SerializeToString()
    with written_whole(output_dir, needed=len(serialized)) as folder:  # the folder appears whole or not at all
        with open(Path(folder) / ONNX_FILE, "wb") as file:
            file.write(serialized)
        config.save_pretrained(folder)
        ElmoTokenizer(max_characters_per_token=config.max_characters_per_token).save_pretrained(folder)
    return Path(output_dir) / ONNX_FILE


def example_inputs(chars, num_characters, lengths, seed=0):
    """Random character ids `(len(lengths), max(lengths), chars)` in `1..num_characters - 1` for rows of the given
    numbers of words, right-padded with zeros, and their attention mask `(len(lengths), max(lengths))`."""
    generator = torch.Generator().manual_seed(seed)
    mask = (torch.arange(max(lengths)) < torch.tensor(lengths).unsqueeze(1)).long()  # (batch, words)
    shape = (len(lengths), max(lengths), chars)
    input_ids = torch.randint(1, num_characters, shape, generator=generator) * mask.unsqueeze(-1)
    return input_ids, mask


def _verify(graph, onnx_model):
    """Raise unless the exported file matches `graph` on batches of other shapes than the traced one."""
    for lengths in ([5], [4, 1, 6]):
        input_ids, mask = example_inputs(onnx_model.max_characters_per_token, onnx_model.num_characters, lengths, 1)
        with torch.no_grad():
            expected = graph(input_ids, mask).numpy()
        difference = float(np.abs(onnx_model(input_ids.numpy(), mask.numpy()) - expected).max())
        if not difference <= VERIFY_ATOL:
            raise RuntimeError(
                f"the ONNX export differs from the model by {difference:.2e} on rows of {lengths} words "
                f"(tolerance {VERIFY_ATOL}): an exporter or onnxruntime problem, please report it"
            )


def _import(name):
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(f"{name} is not installed; the ONNX export needs it: pip install 'elmo-hf[onnx]'") from error


def _drop_value_info(graph, subgraph=False):
    """Remove the exporter's shape annotations of intermediate values, in `graph` and its Loop bodies: some in a
    loop body are wrong (rank 4 for the rank-3 state), and onnxruntime warns at every run. The model's inputs and
    outputs keep theirs; onnxruntime infers the rest."""
    del graph.value_info[:]
    if subgraph:
        for output in graph.output:
            if output.type.HasField("tensor_type"):
                output.type.tensor_type.ClearField("shape")
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                _drop_value_info(attribute.g, subgraph=True)


class ElmoOnnxModel:
    r"""
    A file written by `export_onnx`, run with onnxruntime, with its inputs checked first.

    Args:
        path (str or `Path` or bytes): the export folder, its model.onnx, or the serialized model.
        providers (list, optional): onnxruntime execution providers; CPU when None.
        session_options (`onnxruntime.SessionOptions`, optional): e.g. thread counts.

    Call it with `input_ids` `(batch, words, max_characters_per_token)` (integers) and optionally `attention_mask`
    `(batch, words)` (0/1, right padding; derived from the ids when None), as numpy arrays or CPU tensors. It
    returns every layer, `(num_lstm_layers + 1, batch, words, 2 * projection_dim)` float32, as numpy.
    """

    def __init__(self, path, providers=None, session_options=None):
        onnxruntime = _import("onnxruntime")
        if not isinstance(path, bytes):
            path = Path(path)
            if path.is_dir():
                path = path / ONNX_FILE
            if not path.is_file():
                raise FileNotFoundError(f"{path}: no such file (expected a model.onnx written by elmo-hf export-onnx)")
            path = str(path)
        self.session = onnxruntime.InferenceSession(
            path, sess_options=session_options, providers=providers or ["CPUExecutionProvider"]
        )
        metadata = self.session.get_modelmeta().custom_metadata_map
        if "max_characters_per_token" not in metadata:
            raise ValueError(f"{path}: not an ELMo export (its metadata lacks max_characters_per_token)")
        self.max_characters_per_token = int(metadata["max_characters_per_token"])
        self.num_characters = int(metadata["num_characters"])

    def __call__(self, input_ids, attention_mask=None):
        input_ids, attention_mask = self.check_inputs(input_ids, attention_mask)
        feed = {"input_ids": input_ids, "attention_mask": attention_mask}
        return self.session.run([OUTPUT_NAME], feed)[0]

    def check_inputs(self, input_ids, attention_mask=None):
        """The inputs as int64 arrays; a `ValueError` naming the input, what it is and what was expected."""
        input_ids = np.asarray(input_ids)
        chars = self.max_characters_per_token
        expected = f"expected (batch, words, {chars}) integer character ids from ElmoTokenizer"
        if input_ids.dtype.kind not in "iu" or input_ids.ndim != 3 or input_ids.shape[2] != chars or not input_ids.size:
            raise ValueError(f"input_ids: shape {input_ids.shape} dtype {input_ids.dtype}, {expected}")
        if input_ids.min() < 0 or input_ids.max() >= self.num_characters:
            raise ValueError(
                f"input_ids: values {input_ids.min()}..{input_ids.max()}, expected character ids in "
                f"0..{self.num_characters - 1}"
            )
        if attention_mask is None:
            attention_mask = (input_ids > 0).any(axis=-1)
        attention_mask = np.asarray(attention_mask)
        words = input_ids.shape[:2]
        if attention_mask.dtype.kind not in "iub" or attention_mask.shape != words:
            raise ValueError(
                f"attention_mask: shape {attention_mask.shape} dtype {attention_mask.dtype}, expected {words} "
                "(batch, words) of 0 and 1"
            )
        if not np.isin(attention_mask, (0, 1)).all():
            raise ValueError("attention_mask: values other than 0 and 1, expected 1 for words and 0 for padding")
        lengths = attention_mask.sum(axis=1, keepdims=True)  # (batch, 1)
        if not np.array_equal(attention_mask != 0, np.arange(words[1]) < lengths):
            raise ValueError(
                "attention_mask: padding before a word, expected right padding (each row's words first; tokenize "
                "with padding_side='right')"
            )
        return input_ids.astype(np.int64), attention_mask.astype(np.int64)
