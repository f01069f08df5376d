"""allennlp's ELMo interface on elmo-hf: `Elmo`, `batch_to_ids`, `ElmoTokenEmbedder`, `remove_sentence_boundaries` and
the lower-level `_ElmoBiLm` and `_ElmoCharacterEncoder` (allennlp 2.10.1), and `ElmoEmbedder` (allennlp 0.9).

    from elmo_hf.compat.allennlp import Elmo, ElmoEmbedder, batch_to_ids   # was: from allennlp.modules.elmo import ...

    elmo = Elmo(options_file, weight_file, num_output_representations=1)   # the published options.json + .hdf5
    output = elmo(batch_to_ids([["The", "cat", "."], ["Hi"]]))
    output["elmo_representations"][0]   # (2, 3, 1024); output["mask"]: (2, 3) bool

Same names, arguments, defaults and outputs as allennlp, equal to allennlp 2.10.1's numbers within 1e-5 (tests against
its stored outputs). `options_file`/`weight_file` take the published pair (local paths, or their URLs, which are
downloaded once), converted on first use by `elmo_hf.convert.convert_bilm_tf.convert_hdf5` (checked against bilm-tf's
arithmetic) and cached under `~/.cache/elmo_hf/allennlp/` by the files' content hash; or `options_file` names a
converted elmo-hf checkpoint (a folder or Hub name) and `weight_file` is None.

One difference, on purpose: allennlp's biLM carries its LSTM state from one call to the next, so a sentence's vectors
depend on what ran before it. Here `stateful=False` is the default (vectors depend only on the sentence);
`stateful=True` restores allennlp's behaviour exactly, batches of changing size included (row i continues row i).
The biLM math is `ElmoModel`'s, the mix is `ElmoScalarMix`, the cached vocabulary is `ElmoTokenCache`.
A malformed argument (ids of the wrong rank, dtype, width or range; a word that is not a string; a string where a list
of words belongs) raises `UserInputError` (a ValueError) with one line naming it, before any torch code runs.
"""

import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedConfig

from ..inference.embedder import ElmoEmbedder as _Embedder
from ..inference.embedder import ElmoTokenCache, _import_h5py, _rank_and_world_size
from ..model.char_ids import word_to_char_ids
from ..model.modeling_elmo import ElmoModel, ElmoScalarMix
from ..user_errors import UserInputError

logger = logging.getLogger(__name__)

BOS_TOKEN, EOS_TOKEN = "<S>", "</S>"
MAX_CHARACTERS = 50  # allennlp's ELMoCharacterMapper.max_word_length
DEFAULT_BATCH_SIZE = 64  # allennlp 0.9's elmo command and ElmoEmbedder
OUTPUT_FORMATS = ("all", "top", "average")


def batch_to_ids(batch: Sequence[Sequence[str]]) -> torch.Tensor:
    """Character ids of tokenized sentences, as allennlp's `batch_to_ids`.

    Args:
        batch (list of lists of str): tokenized sentences.

    Returns:
        `torch.LongTensor` of shape `(len(batch), longest sentence, 50)`: each word's 50 character ids (bilm-tf's,
        shifted by +1), padding words all zeros.
    """
    _check_batch(batch)
    longest = max((len(sentence) for sentence in batch), default=0)
    ids = torch.zeros(len(batch), longest, MAX_CHARACTERS, dtype=torch.long)
    for row, sentence in enumerate(batch):
        if sentence:
            ids[row, : len(sentence)] = torch.tensor([word_to_char_ids(word, MAX_CHARACTERS) for word in sentence])
    return ids


# ---- loading: the published pair, converted once and cached, or a converted checkpoint ----


def cache_dir() -> str:
    """Where converted pairs are kept: $ELMO_HF_CACHE, else $XDG_CACHE_HOME/elmo_hf, else ~/.cache/elmo_hf; then
    `allennlp/`."""
    root = os.environ.get("ELMO_HF_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "elmo_hf"
    )
    return os.path.join(root, "allennlp")


def load_elmo_model(
    options_file: str | os.PathLike[str] | None, weight_file: str | os.PathLike[str] | None
) -> ElmoModel:
    """The `ElmoModel` for allennlp's `options_file` + `weight_file` (paths or URLs), converted and cached on first
    use, or for a converted checkpoint (`options_file` a folder or Hub name, `weight_file` None)."""
    if options_file is None:
        raise UserInputError("options_file: required (the options.json, or a converted elmo-hf checkpoint folder)")
    options_file, weight_file = str(options_file), None if weight_file is None else str(weight_file)
    if weight_file is None:
        if os.path.isfile(options_file):
            raise UserInputError(f"weight_file: required with the options file {options_file} (the weights .hdf5)")
        # A Hub name is "name" or "org/name"; anything else that is not a folder here is a missing local path.
        local = options_file.startswith((".", "~")) or os.path.isabs(options_file) or options_file.count("/") > 1
        if local and not os.path.isdir(options_file):
            raise UserInputError(f"options_file: {options_file}: no such folder (a converted elmo-hf checkpoint)")
        try:
            return ElmoModel.from_pretrained(options_file)
        except (OSError, ValueError) as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise UserInputError(
                f"options_file: {options_file!r} is neither a converted elmo-hf checkpoint (a folder or Hub name) nor "
                f"an options.json with a weight_file ({reason})"
            ) from None
    options_file, weight_file = _local(options_file, "options_file"), _local(weight_file, "weight_file")
    for name, path in (("options_file", options_file), ("weight_file", weight_file)):
        if not os.path.isfile(path):
            raise UserInputError(f"{name}: {path}: no such file")
    folder = os.path.join(cache_dir(), _content_digest(options_file, weight_file)[:32])
    if not os.path.isfile(os.path.join(folder, "model.safetensors")):
        _convert_into(options_file, weight_file, folder)
    return ElmoModel.from_pretrained(folder)


def _local(path: str, name: str) -> str:
    """A local path for `path`; a URL is downloaded once (resumed when broken): a published model's file where
    `elmo-hf convert --published` keeps it, any other under `urls/`."""
    if not path.startswith(("http://", "https://")):
        return path
    from ..convert.published import PUBLISHED_MODELS, default_download_dir, download

    filename = path.rsplit("/", 1)[-1] or name
    folder = os.path.join("urls", hashlib.sha256(path.encode("utf-8")).hexdigest()[:16])
    for model in PUBLISHED_MODELS:
        if path in model.urls():
            folder = model.name
    return download(path, os.path.join(default_download_dir(), folder, filename))


def _content_digest(*paths: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def _convert_into(options_file: str, weight_file: str, folder: str) -> None:
    """Convert and verify the pair (elmo_hf.convert.convert_bilm_tf, as `elmo-hf convert`), then move it to `folder`
    whole."""
    try:
        import h5py  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f"weight_file: reading the published .hdf5 weights ({weight_file}) needs h5py: pip install "
            "'elmo-hf[conversion]' (once converted and cached, or with a converted elmo-hf checkpoint, nothing more "
            "is needed)"
        ) from error
    from ..convert.convert_bilm_tf import convert_hdf5

    os.makedirs(os.path.dirname(folder), exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".converting-", dir=os.path.dirname(folder))
    try:
        convert_hdf5(options_file, weight_file, staging, {"repo_id": os.path.basename(folder)})
        try:
            os.rename(staging, folder)
        except OSError:  # another process cached the same pair first (or a half-made folder is in the way)
            if not os.path.isfile(os.path.join(folder, "model.safetensors")):
                shutil.rmtree(folder, ignore_errors=True)
                os.rename(staging, folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# ---- what callers pass: checked first, so that a mistake is one line naming the value, never a torch error ----


def _describe(value: object) -> str:
    text = repr(value)
    return f"{text[:60]}... ({type(value).__name__})" if len(text) > 60 else f"{text} ({type(value).__name__})"


def _check_words(sentence: object, name: str) -> None:
    """`sentence` must be a list (or tuple) of str; `name` says where it came from, e.g. "batch[2]"."""
    if isinstance(sentence, str):
        raise UserInputError(f"{name}: expected a list of words, got the string {sentence!r}; split it into words")
    if not isinstance(sentence, (list, tuple)):
        raise UserInputError(f"{name}: expected a list of words (str), got {_describe(sentence)}")
    for index, word in enumerate(sentence):
        if not isinstance(word, str):
            raise UserInputError(f"{name}[{index}]: expected a word (str), got {_describe(word)}")


def _check_batch(batch: object, name: str = "batch") -> None:
    """`batch` must be a list (or tuple) of tokenized sentences."""
    if isinstance(batch, str) or not isinstance(batch, (list, tuple)):
        raise UserInputError(f"{name}: expected a list of tokenized sentences (lists of words), got {_describe(batch)}")
    for index, sentence in enumerate(batch):
        _check_words(sentence, f"{name}[{index}]")


def _check_char_ids(
    inputs: object, config: PreTrainedConfig | None = None, name: str = "inputs", exact_rank: bool = True
) -> torch.Tensor:
    """`inputs` as `batch_to_ids` makes them, for the model of `config` (None: only the type and rank): an integer
    tensor `(batch, words, 50)` (or with more leading dimensions unless `exact_rank`), ids in range, at least one
    sentence, padding words (all zeros) only after each row's words. Returns it as a LongTensor."""
    shape = "(batch, words, 50)" if exact_rank else "(batch, words, 50) or (..., words, 50)"
    if not isinstance(inputs, torch.Tensor):
        raise UserInputError(
            f"{name}: expected a tensor of character ids {shape} from batch_to_ids, got {_describe(inputs)}"
        )
    if inputs.is_floating_point() or inputs.is_complex() or inputs.dtype == torch.bool:
        raise UserInputError(
            f"{name}: expected integer character ids (torch.long, from batch_to_ids), got dtype {inputs.dtype}"
        )
    if inputs.dim() < 3 or (exact_rank and inputs.dim() != 3):
        raise UserInputError(
            f"{name}: expected shape {shape} (character ids from batch_to_ids), got {tuple(inputs.shape)}"
        )
    if config is None:
        return inputs
    width, num_characters = config.max_characters_per_token, config.num_characters
    if inputs.shape[-1] != width:
        raise UserInputError(
            f"{name}: the last dimension must be {width} (characters per word, from batch_to_ids), "
            f"got shape {tuple(inputs.shape)}"
        )
    if inputs.shape[:-2].numel() == 0:  # no sentence (allennlp would fail inside torch)
        raise UserInputError(f"{name}: expected at least one sentence, got shape {tuple(inputs.shape)}")
    out_of_range = (inputs < 0) | (inputs >= num_characters)
    if out_of_range.any():
        index = tuple(out_of_range.nonzero()[0].tolist())
        raise UserInputError(
            f"{name}: character ids must be in 0..{num_characters - 1}, got {int(inputs[index])} at index {index}"
        )
    words = (inputs > 0).any(dim=-1)  # (..., words)
    after_padding = words & ~words.cummin(dim=-1).values  # a word after a padding word of its row
    if after_padding.any():
        index = tuple(after_padding.nonzero()[0].tolist())
        raise UserInputError(
            f"{name}: word {index} comes after a padding word (all zero ids) in its row; padding "
            "must follow each sentence's words"
        )
    return inputs.long()


def _check_stateful(stateful: object) -> None:
    if not isinstance(stateful, bool):
        raise UserInputError(f"stateful: must be True or False, got {stateful!r}")


# ---- the biLM with allennlp's sentence boundaries ----


def _boundary_ids(device: torch.device | str) -> torch.Tensor:
    return torch.tensor([word_to_char_ids(token, MAX_CHARACTERS) for token in (BOS_TOKEN, EOS_TOKEN)], device=device)


def _with_boundaries(char_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`<S>` before and `</S>` after each row's words, as allennlp's `add_sentence_boundary_token_ids`:
    (batch, words, 50) -> (batch, words + 2, 50) and the mask of real positions (batch, words + 2)."""
    lengths = (char_ids > 0).any(dim=-1).sum(dim=1)  # (batch,)
    bos, eos = _boundary_ids(char_ids.device)
    rows = torch.arange(char_ids.shape[0], device=char_ids.device)
    wrapped = torch.nn.functional.pad(char_ids, (0, 0, 1, 1))  # (batch, words + 2, 50)
    wrapped[:, 0] = bos
    wrapped[rows, lengths + 1] = eos
    positions = torch.arange(wrapped.shape[1], device=char_ids.device)
    return wrapped, positions < (lengths + 2).unsqueeze(1)


def remove_sentence_boundaries(tensor: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""
    allennlp's `remove_sentence_boundaries` (`allennlp.nn.util`): drop the `<S>`/`</S>` positions of each row.

    Args:
        tensor (`torch.Tensor` of shape `(batch, words + 2, ...)`): with the boundaries, e.g. an `_ElmoBiLm`
            activation.
        mask (`torch.BoolTensor` of shape `(batch, words + 2)`): its real positions, boundaries included.

    Returns:
        (`tensor` without the boundaries `(batch, words, ...)`, padding zero; the mask `(batch, words)`).
    """
    lengths = mask.sum(dim=1) - 2  # (batch,)
    new_mask = torch.arange(tensor.shape[1] - 2, device=tensor.device) < lengths.unsqueeze(1)  # (batch, words)
    inner = tensor[:, 1:-1]
    return inner.masked_fill(~new_mask.view(*new_mask.shape, *[1] * (inner.dim() - 2)), 0.0), new_mask


class _LstmState:
    """Runs `ElmoModel` on allennlp-style character ids (no boundaries), carrying the LSTM state when stateful (the
    part of allennlp's `_ElmoBiLm._elmo_lstm` that callers reach: `reset_states()`)."""

    def __init__(self, stateful: bool) -> None:
        self.stateful = stateful
        self.lstm_states: tuple[torch.Tensor, ...] | None = None

    def reset_states(self) -> None:
        self.lstm_states = None

    def run(
        self, model: ElmoModel, char_ids: torch.Tensor, token_cache: ElmoTokenCache | None = None
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """char_ids (batch, words, 50) -> (layers: list of (batch, words + 2, dim), mask (batch, words + 2))."""
        wrapped, mask = _with_boundaries(char_ids)
        output = model(
            input_ids=wrapped,
            output_hidden_states=True,
            lstm_states=self.lstm_states if self.stateful else None,
            token_cache=token_cache,
        )
        if self.stateful:  # detached, as allennlp's _EncoderBase does after every batch
            self.lstm_states = tuple(state.detach() for state in output.lstm_states)
        return list(output.hidden_states), mask


def _load_frozen(
    options_file: str | os.PathLike[str] | None, weight_file: str | os.PathLike[str] | None, requires_grad: bool
) -> ElmoModel:
    model = load_elmo_model(options_file, weight_file)
    model.requires_grad_(bool(requires_grad))
    model.train(False)  # the biLM has no dropout of its own; train() reaches it but changes nothing
    return model


class _ElmoCharacterEncoder(nn.Module):
    r"""
    allennlp's `_ElmoCharacterEncoder`: the context-independent token vectors (character CNN, highways, projection)
    of each word and of the `<S>`/`</S>` boundaries it adds.

    Args:
        options_file, weight_file: as for [`Elmo`].
        requires_grad (bool, defaults to False): fine-tune the encoder's parameters.
    """

    def __init__(
        self,
        options_file: str | os.PathLike[str] | None,
        weight_file: str | os.PathLike[str] | None,
        requires_grad: bool = False,
    ) -> None:
        super().__init__()
        self.model = _load_frozen(options_file, weight_file, requires_grad)
        self.requires_grad = bool(requires_grad)
        self.output_dim = self.model.config.projection_dim

    @classmethod
    def _sharing(cls, model: ElmoModel) -> "_ElmoCharacterEncoder":
        """An encoder over the character encoder of `model`, which the caller owns (not registered here, so that
        its parameters appear once in the caller's state dict)."""
        encoder = cls.__new__(cls)
        nn.Module.__init__(encoder)
        object.__setattr__(encoder, "model", model)
        encoder.requires_grad = any(parameter.requires_grad for parameter in model.parameters())
        encoder.output_dim = model.config.projection_dim
        return encoder

    def get_output_dim(self) -> int:
        """`projection_dim`, the width of each token vector."""
        return self.output_dim

    def forward(self, inputs: torch.Tensor) -> dict[str, torch.Tensor]:
        r"""
        Args:
            inputs (`torch.LongTensor` of shape `(batch, words, 50)`): from `batch_to_ids`.

        Returns:
            dict: `"token_embedding"` `(batch, words + 2, get_output_dim())`, `<S>` first and `</S>` after each row's
            words (padding positions hold the encoder's vector of an all-zero word, as allennlp's), and `"mask"`, a
            `torch.BoolTensor` `(batch, words + 2)`.
        """
        wrapped, mask = _with_boundaries(_check_char_ids(inputs, self.model.config))
        return {"mask": mask, "token_embedding": self.model.character_encoder(wrapped)}


class _ElmoBiLm(nn.Module):
    r"""
    allennlp's `_ElmoBiLm`: every layer of the biLM, sentence boundaries included.

    Args:
        options_file, weight_file: as for [`Elmo`].
        requires_grad (bool, defaults to False): fine-tune the biLM's parameters.
        vocab_to_cache (list of str, optional): words whose token vectors are computed once; `forward` then takes
            `word_inputs`, indices into this list (index 0 is padding). An index outside it falls back to `inputs`.
        stateful (bool, defaults to False): carry the LSTM state from one call to the next as allennlp did (row i
            continues row i; `reset_states()` forgets it). False: every call starts from zeros.

    Attributes:
        num_layers (int): the token layer and the LSTM layers.
        model ([`ElmoModel`]): the biLM that runs.
    """

    _vocabulary_char_ids: torch.Tensor  # a buffer, with a cached vocabulary

    def __init__(
        self,
        options_file: str | os.PathLike[str] | None,
        weight_file: str | os.PathLike[str] | None,
        requires_grad: bool = False,
        vocab_to_cache: Sequence[str] | None = None,
        stateful: bool = False,
    ) -> None:
        super().__init__()
        _check_stateful(stateful)
        if requires_grad and vocab_to_cache:
            raise UserInputError(
                "vocab_to_cache: cannot be combined with requires_grad=True here: the cached vectors are fixed "
                "(allennlp trained them as a separate table, a mode its own warning calls not well defined)"
            )
        self.model = _load_frozen(options_file, weight_file, requires_grad)
        self._requires_grad = bool(requires_grad)
        object.__setattr__(self, "_token_embedder", _ElmoCharacterEncoder._sharing(self.model))
        self._elmo_lstm = _LstmState(stateful)
        self.num_layers = self.model.config.num_lstm_layers + 1
        self._token_cache: ElmoTokenCache | None = None
        if vocab_to_cache:
            self.create_cached_cnn_embeddings(vocab_to_cache)

    @property
    def stateful(self) -> bool:
        return self._elmo_lstm.stateful

    def reset_states(self) -> None:
        """Forget the carried LSTM state (stateful mode): the next call starts from zeros."""
        self._elmo_lstm.reset_states()

    def get_output_dim(self) -> int:
        """The width of each layer: `2 * projection_dim`."""
        return 2 * self.model.config.projection_dim

    def create_cached_cnn_embeddings(self, tokens: Sequence[str]) -> None:
        """Compute the token vectors of `tokens` (a list of str) once; `forward`'s `word_inputs` index this list."""
        _check_words(tokens, "vocab_to_cache")
        vocabulary_ids = torch.tensor([word_to_char_ids(word, MAX_CHARACTERS) for word in tokens])  # (V, 50)
        device = self.model.device
        self.register_buffer("_vocabulary_char_ids", vocabulary_ids.to(device), persistent=False)
        with torch.no_grad():
            self._token_cache = ElmoTokenCache(
                self.model.character_encoder, torch.cat([_boundary_ids(device), self._vocabulary_char_ids])
            )

    def forward(self, inputs: torch.Tensor, word_inputs: torch.Tensor | None = None) -> dict[str, Any]:
        r"""
        Args:
            inputs (`torch.LongTensor` of shape `(batch, words, 50)`): from `batch_to_ids`.
            word_inputs (`torch.LongTensor` of shape `(batch, words)`, optional): indices into `vocab_to_cache`; used
                only when the biLM has a cached vocabulary.

        Returns:
            dict: `"activations"`, a list of `num_layers` tensors `(batch, words + 2, get_output_dim())` (the token
            layer `[x; x]` first, zero at padding), and `"mask"`, a `torch.BoolTensor` `(batch, words + 2)`.
        """
        char_ids = _check_char_ids(inputs, self.model.config)
        if self._token_cache is not None and word_inputs is not None:
            char_ids = self._cached_word_char_ids(_check_word_ids(word_inputs, char_ids.shape[:-1]), char_ids)
        layers, mask = self._elmo_lstm.run(self.model, char_ids, self._token_cache)
        layers[0] = layers[0] * mask.unsqueeze(-1)
        return {"activations": layers, "mask": mask}

    def _cached_word_char_ids(self, word_ids: torch.Tensor, char_ids: torch.Tensor) -> torch.Tensor:
        """The character ids of cached words (padding, id 0, all zeros). As allennlp, an id outside the vocabulary
        falls back to the character ids given in `inputs`."""
        vocabulary = self._vocabulary_char_ids
        if word_ids.numel() and (int(word_ids.min()) < 0 or int(word_ids.max()) >= vocabulary.shape[0]):
            logger.warning("word_inputs hold ids outside vocab_to_cache; running the character CNN on inputs instead")
            return char_ids
        return vocabulary[word_ids] * (word_ids > 0).unsqueeze(-1)  # (batch, words, 50)


def _check_word_ids(word_inputs: object, shape: Sequence[int]) -> torch.Tensor:
    if not isinstance(word_inputs, torch.Tensor) or word_inputs.is_floating_point() or word_inputs.dtype == torch.bool:
        described = word_inputs.dtype if isinstance(word_inputs, torch.Tensor) else _describe(word_inputs)
        raise UserInputError(f"word_inputs: expected integer indices into vocab_to_cache, got {described}")
    if tuple(word_inputs.shape) != tuple(shape):
        raise UserInputError(
            f"word_inputs: expected shape {tuple(shape)} (inputs' without the characters), got "
            f"{tuple(word_inputs.shape)}"
        )
    return word_inputs.long()


class Elmo(nn.Module):
    r"""
    allennlp's `Elmo`: `num_output_representations` learned mixes of the biLM's layers (eq. 1 of the paper).

    Args:
        options_file (str): the published options.json (path or URL), or a converted elmo-hf checkpoint (a folder or
            Hub name) with `weight_file=None`. None with `module`.
        weight_file (str): the published weights .hdf5 (path or URL); None with a checkpoint or `module`.
        num_output_representations (int): how many mixes (each with its own weights and gamma) to return.
        requires_grad (bool, defaults to False): fine-tune the biLM's parameters too.
        do_layer_norm (bool, defaults to False): normalise each layer before mixing (over the real positions,
            boundaries included, as allennlp).
        dropout (float, defaults to 0.5): dropout on each representation (in training mode only).
        vocab_to_cache (list of str, optional): words whose character-CNN vectors are computed once; `forward` then
            takes `word_inputs`, indices into this list (index 0 is padding).
        keep_sentence_boundaries (bool, defaults to False): keep the `<S>`/`</S>` positions: `words + 2` per row.
        scalar_mix_parameters (list of floats, optional): fixed (not trained) un-normalised layer weights.
        module (`torch.nn.Module`, optional): the biLM to mix instead of loading one, e.g. an [`_ElmoBiLm`], with
            `options_file=None` and `weight_file=None`: as in allennlp, it has a `num_layers` attribute and a
            `get_output_dim()` method, and its forward takes `(inputs, word_inputs)` and returns a dict with
            `"activations"` and `"mask"`. `requires_grad` and `stateful` are then the module's own.
        stateful (bool, defaults to False): carry the LSTM state from one call to the next as allennlp did (row i
            continues row i; `reset_states()` forgets it). False: every call starts from zeros.
    """

    def __init__(
        self,
        options_file: str | os.PathLike[str] | None,
        weight_file: str | os.PathLike[str] | None,
        num_output_representations: int,
        requires_grad: bool = False,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        vocab_to_cache: Sequence[str] | None = None,
        keep_sentence_boundaries: bool = False,
        scalar_mix_parameters: Sequence[float] | None = None,
        module: nn.Module | None = None,
        stateful: bool = False,
    ) -> None:
        super().__init__()
        count = num_output_representations
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise UserInputError(f"num_output_representations: must be a positive int, got {count!r}")
        if not (isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0):
            raise UserInputError(f"dropout: must be a probability in [0, 1), got {dropout!r}")
        _check_stateful(stateful)
        # An _ElmoBiLm, or the caller's module with its num_layers, get_output_dim() and forward.
        self._elmo_lstm: Any
        if module is not None:
            _check_module(module, options_file, weight_file, stateful)
            self._elmo_lstm = module
        else:
            self._elmo_lstm = _ElmoBiLm(
                options_file, weight_file, requires_grad=requires_grad, vocab_to_cache=vocab_to_cache, stateful=stateful
            )
        self._has_cached_vocab = bool(vocab_to_cache) if module is None else vocab_to_cache is not None
        num_layers = self._elmo_lstm.num_layers
        if scalar_mix_parameters is not None and len(scalar_mix_parameters) != num_layers:
            raise UserInputError(
                f"scalar_mix_parameters: needs {num_layers} values (the token layer and "
                f"{num_layers - 1} LSTM layers), got {len(scalar_mix_parameters)}: {scalar_mix_parameters!r}"
            )
        self._scalar_mixes: list[ElmoScalarMix] = []
        for index in range(count):
            mix = ElmoScalarMix(
                num_layers,
                initial_weights=scalar_mix_parameters,
                trainable=scalar_mix_parameters is None,
                do_layer_norm=do_layer_norm,
            )
            self.add_module(f"scalar_mix_{index}", mix)  # allennlp's attribute names
            self._scalar_mixes.append(mix)
        self._dropout = nn.Dropout(p=dropout)
        self._keep_sentence_boundaries = keep_sentence_boundaries

    @property
    def bilm(self) -> ElmoModel | None:
        """The [`ElmoModel`] that runs (None when `module` is not an `_ElmoBiLm`)."""
        return self._elmo_lstm.model if isinstance(self._elmo_lstm, _ElmoBiLm) else None

    @property
    def stateful(self) -> bool:
        return getattr(self._elmo_lstm, "stateful", False)

    def get_output_dim(self) -> int:
        """The width of each representation: `2 * projection_dim`."""
        return self._elmo_lstm.get_output_dim()

    def reset_states(self) -> None:
        """Forget the carried LSTM state (stateful mode): the next call starts from zeros."""
        if hasattr(self._elmo_lstm, "reset_states"):
            self._elmo_lstm.reset_states()

    def forward(self, inputs: torch.Tensor, word_inputs: torch.Tensor | None = None) -> dict[str, Any]:
        r"""
        Args:
            inputs (`torch.LongTensor` of shape `(batch, words, 50)`, or `(..., words, 50)`): from `batch_to_ids`.
            word_inputs (`torch.LongTensor` of shape `(batch, words)`, optional): indices into `vocab_to_cache`
                (0 is padding); used instead of `inputs` when the Elmo has a cached vocabulary.

        Returns:
            dict: `"elmo_representations"`, a list of `num_output_representations` tensors of shape
            `(batch, words, get_output_dim())` (`words + 2` with `keep_sentence_boundaries`), and `"mask"`, a
            `torch.BoolTensor` of shape `(batch, words)`; leading dimensions as in the input.
        """
        bilm = self._elmo_lstm
        inputs = _check_char_ids(inputs, bilm.model.config if isinstance(bilm, _ElmoBiLm) else None, exact_rank=False)
        original_shape = inputs.size()
        char_ids = inputs.view(-1, *original_shape[-2:]) if len(original_shape) > 3 else inputs
        if word_inputs is not None:
            if not self._has_cached_vocab:
                logger.warning("Word inputs were passed to ELMo but it does not have a cached vocab.")
                word_inputs = None
            else:
                original_word_size = _check_word_ids(word_inputs, original_shape[:-1]).size()
                word_inputs = word_inputs.reshape(-1, original_word_size[-1])
        bilm_output = bilm(char_ids, word_inputs)
        layers, mask_with_boundaries = bilm_output["activations"], bilm_output["mask"]
        representations = []
        for mix in self._scalar_mixes:
            mixed = mix(layers, mask_with_boundaries)  # (batch, words + 2, dim)
            if self._keep_sentence_boundaries:
                representation, mask = mixed, mask_with_boundaries
            else:
                representation, mask = remove_sentence_boundaries(mixed, mask_with_boundaries)
            representations.append(self._dropout(representation))
        if len(original_shape) <= 3:
            return {"elmo_representations": representations, "mask": mask}
        leading = tuple(original_shape[:-2]) + (mask.shape[-1],)
        return {
            "elmo_representations": [representation.view(*leading, -1) for representation in representations],
            "mask": mask.view(leading),
        }


def _check_module(module: object, options_file: object, weight_file: object, stateful: bool) -> None:
    if options_file is not None or weight_file is not None:
        raise UserInputError(
            f"module: pass options_file=None and weight_file=None with a module, got {options_file!r} and "
            f"{weight_file!r}"
        )
    if stateful:
        raise UserInputError("stateful: give it to the module (e.g. _ElmoBiLm(..., stateful=True)), not with module")
    num_layers = getattr(module, "num_layers", None)
    if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers < 1:
        raise UserInputError(
            f"module: needs a positive int attribute num_layers (the layers it returns), got {_describe(module)}"
        )
    if not callable(getattr(module, "get_output_dim", None)) or not callable(module):
        raise UserInputError(f"module: needs get_output_dim() and a forward, got {_describe(module)}")


class ElmoTokenEmbedder(nn.Module):
    r"""
    allennlp's `ElmoTokenEmbedder`: one mix of the biLM's layers (an [`Elmo`] with `num_output_representations=1`),
    optionally projected.

    Args:
        options_file, weight_file: as for [`Elmo`]; when both are None, the published "original" model (allennlp's
            default), downloaded on first use.
        do_layer_norm, dropout, requires_grad, vocab_to_cache, scalar_mix_parameters, stateful: as for [`Elmo`].
        projection_dim (int, optional): project each vector to this width with a trained linear layer.
    """

    def __init__(
        self,
        options_file: str | os.PathLike[str] | None = None,
        weight_file: str | os.PathLike[str] | None = None,
        do_layer_norm: bool = False,
        dropout: float = 0.5,
        requires_grad: bool = False,
        projection_dim: int | None = None,
        vocab_to_cache: Sequence[str] | None = None,
        scalar_mix_parameters: Sequence[float] | None = None,
        stateful: bool = False,
    ) -> None:
        super().__init__()
        if options_file is None and weight_file is None:
            options_file, weight_file = _published_original()
        self._elmo = Elmo(
            options_file,
            weight_file,
            1,
            do_layer_norm=do_layer_norm,
            dropout=dropout,
            requires_grad=requires_grad,
            vocab_to_cache=vocab_to_cache,
            scalar_mix_parameters=scalar_mix_parameters,
            stateful=stateful,
        )
        if projection_dim is not None and (isinstance(projection_dim, bool) or not isinstance(projection_dim, int)):
            raise UserInputError(f"projection_dim: must be a positive int or None, got {projection_dim!r}")
        self._projection = nn.Linear(self._elmo.get_output_dim(), projection_dim) if projection_dim else None
        self.output_dim = projection_dim or self._elmo.get_output_dim()

    def get_output_dim(self) -> int:
        return self.output_dim

    def forward(self, elmo_tokens: torch.Tensor, word_inputs: torch.Tensor | None = None) -> torch.Tensor:
        r"""
        Args:
            elmo_tokens (`torch.LongTensor` of shape `(batch, words, 50)`): from `batch_to_ids`.
            word_inputs (`torch.LongTensor` of shape `(batch, words)`, optional): as for [`Elmo`].

        Returns:
            `torch.Tensor` of shape `(batch, words, get_output_dim())`.
        """
        representation = self._elmo(elmo_tokens, word_inputs)["elmo_representations"][0]
        return representation if self._projection is None else self._projection(representation)


def _published_original() -> tuple[str, str]:
    from ..convert.published import published_model

    return published_model("original").urls()


class ElmoEmbedder:
    r"""
    allennlp 0.9's `ElmoEmbedder`: all the biLM's layers for tokenized sentences, as numpy arrays.

    Args:
        options_file, weight_file: as for [`Elmo`]. When both are None, 0.9's default: the published "original"
            model, downloaded on first use (as `elmo-hf convert --published original` does).
        cuda_device (int, defaults to -1): the GPU to run on; -1 for the CPU.
        stateful (bool, defaults to False): carry the LSTM state from batch to batch as 0.9 did (its
            `embed_sentences` and `embed_file` then depend on the batch size and order); False: every batch starts
            from zeros.
    """

    def __init__(
        self,
        options_file: str | os.PathLike[str] | None = None,
        weight_file: str | os.PathLike[str] | None = None,
        cuda_device: int = -1,
        stateful: bool = False,
    ) -> None:
        if isinstance(cuda_device, bool) or not isinstance(cuda_device, int):
            raise UserInputError(f"cuda_device: must be an int (-1 for the CPU), got {cuda_device!r}")
        if cuda_device >= 0 and cuda_device >= torch.cuda.device_count():
            raise UserInputError(
                f"cuda_device: {cuda_device} is not available ({torch.cuda.device_count()} CUDA devices); "
                "-1 runs on the CPU"
            )
        _check_stateful(stateful)
        device = "cpu" if cuda_device < 0 else f"cuda:{cuda_device}"
        if options_file is None and weight_file is None:
            options_file, weight_file = _published_original()
        self.cuda_device = cuda_device
        self.embedder = _Embedder(load_elmo_model(options_file, weight_file), device=device)
        self._elmo_lstm = _LstmState(stateful)

    @property
    def stateful(self) -> bool:
        return self._elmo_lstm.stateful

    def reset_states(self) -> None:
        """Forget the carried LSTM state (stateful mode)."""
        self._elmo_lstm.reset_states()

    @torch.inference_mode()
    def batch_to_embeddings(self, batch: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """
        Args:
            batch (list of lists of str): tokenized sentences, at least one.

        Returns:
            (activations `(batch, layers, words, dim)`, mask `torch.LongTensor` `(batch, words)`), without `<S>`/`</S>`.
        """
        char_ids = batch_to_ids(batch).to(self.embedder.device)
        if not len(batch):
            raise UserInputError("batch: expected at least one tokenized sentence, got an empty list")
        layers, mask = self._elmo_lstm.run(self.embedder.model, char_ids, self.embedder.token_cache)
        without = [remove_sentence_boundaries(layer.float(), mask) for layer in layers]
        return torch.stack([layer for layer, _ in without], dim=1), without[0][1].long()

    def embed_sentence(self, sentence: Sequence[str]) -> np.ndarray:
        """One tokenized sentence (a list of str) -> float32 array `(layers, words, dim)`."""
        _check_words(sentence, "sentence")
        return self.embed_batch([sentence])[0]

    def embed_batch(self, batch: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Tokenized sentences -> a list of float32 arrays `(layers, words, dim)`; an empty sentence gives
        `(layers, 0, dim)`. Any string is a word, "" included, as in allennlp (`batch_to_ids` gives it the
        begin- and end-of-word characters only)."""
        _check_batch(batch)
        if not batch:
            return []
        if self._plain_words(batch):
            return self.embedder.embed_sentences(batch, layers="all", batch_size=len(batch))
        if all(not sentence for sentence in batch):
            return [self._empty() for _ in batch]
        activations, mask = self.batch_to_embeddings(batch)
        lengths = mask.sum(dim=1).tolist()
        return [
            activations[row, :, :length].cpu().numpy() if length else self._empty()
            for row, length in enumerate(lengths)
        ]

    def embed_sentences(
        self, sentences: Iterable[Sequence[str]], batch_size: int = DEFAULT_BATCH_SIZE
    ) -> Iterator[np.ndarray]:
        """Yield `embed_batch`'s arrays for an iterable of tokenized sentences, in input order, `batch_size` at a time
        (stateless: sentences are grouped by length within each 1000, which gives the same vectors faster)."""
        if isinstance(sentences, str) or not hasattr(sentences, "__iter__"):
            raise UserInputError(
                f"sentences: expected tokenized sentences (lists of words), got {_describe(sentences)}"
            )
        group = batch_size if self.stateful else max(batch_size, 1000)
        pending: list[Sequence[str]] = []
        for index, sentence in enumerate(sentences):
            _check_words(sentence, f"sentences[{index}]")
            pending.append(sentence)
            if len(pending) == group:
                yield from self._embed_group(pending, batch_size)
                pending = []
        if pending:
            yield from self._embed_group(pending, batch_size)

    def _plain_words(self, sentences: Sequence[Sequence[str]]) -> bool:
        """Whether `elmo_hf.ElmoEmbedder` takes these sentences as they are (stateless, no empty sentence, no word
        that is empty or only whitespace): then it embeds them, sorted by length."""
        return not self.stateful and all(sentences) and all(word.strip() for words in sentences for word in words)

    def _embed_group(self, sentences: Sequence[Sequence[str]], batch_size: int) -> Iterator[np.ndarray]:
        if not self._plain_words(sentences):
            for start in range(0, len(sentences), batch_size):
                yield from self.embed_batch(sentences[start : start + batch_size])
        else:
            yield from self.embedder.embed_sentences(sentences, layers="all", batch_size=batch_size)

    def embed_file(
        self,
        input_file: str | os.PathLike[str] | IO[str],
        output_file_path: str | os.PathLike[str],
        output_format: str = "all",
        batch_size: int = DEFAULT_BATCH_SIZE,
        forget_sentences: bool = False,
        use_sentence_keys: bool = False,
    ) -> None:
        """
        Write the vectors of every line of `input_file` (an open text file, as 0.9, or a path) to the hdf5 file
        `output_file_path`, in 0.9's layout: one float32 dataset per line, keyed by the line's index ("0", "1", ...)
        or with `use_sentence_keys` by the line itself, of shape `(layers, words, dim)` for "all" and
        `(words, dim)` for "top" and "average"; plus `sentence_to_index` (a JSON object from each line to its key,
        in a 1-element string dataset) unless `forget_sentences` or `use_sentence_keys`. An open `input_file` is
        closed at the end, as 0.9 did. The output must not exist yet.

        Stateless, this is `elmo_hf.ElmoEmbedder.embed_file` (bounded memory, length-sorted batches) with the keys
        rearranged; stateful, the lines are embedded in order, `batch_size` at a time, as 0.9 did.
        """
        if output_format not in OUTPUT_FORMATS:
            raise UserInputError(f"output_format: must be one of {', '.join(OUTPUT_FORMATS)}, got {output_format!r}")
        input_path, temporary = _input_path(input_file)
        try:
            if self.stateful:
                _write_in_order(
                    self, input_path, output_file_path, output_format, batch_size, forget_sentences, use_sentence_keys
                )
            else:
                embed_file_in_allennlp_layout(
                    self.embedder,
                    input_path,
                    output_file_path,
                    layers=output_format,
                    batch_size=batch_size,
                    forget_sentences=forget_sentences,
                    use_sentence_keys=use_sentence_keys,
                )
        finally:
            if temporary is not None:
                os.unlink(temporary)
            if hasattr(input_file, "close"):
                input_file.close()

    def _empty(self) -> np.ndarray:
        return np.zeros((self.embedder.num_layers, 0, 2 * self.embedder.model.config.projection_dim), np.float32)


# ---- allennlp's hdf5 layout ----


def embed_file_in_allennlp_layout(
    embedder: _Embedder,
    input_path: str,
    output_path: str | os.PathLike[str],
    forget_sentences: bool = False,
    use_sentence_keys: bool = False,
    **embed_file_arguments: Any,
) -> dict[str, Any]:
    """`embedder.embed_file(input_path, output_path, **embed_file_arguments)` (an `elmo_hf.ElmoEmbedder`), then the
    keys of allennlp 0.9's `--forget-sentences` (no `sentence_to_index`) and `--use-sentence-keys` (each line's
    dataset named by the line itself). `output_path` is written as hdf5 whatever its suffix, as allennlp did, unless
    it ends in .npz (which keeps line-index keys). The file appears whole, under its name, at the end. Returns
    `embed_file`'s summary."""
    output_path = Path(output_path)
    suffix = output_path.suffix.lower()
    rearrange = forget_sentences or use_sentence_keys
    if suffix == ".npz":
        if rearrange:
            flag = "--use-sentence-keys" if use_sentence_keys else "--forget-sentences"
            raise UserInputError(f"{flag}: allennlp's layout is hdf5; name the output .hdf5, not {output_path}")
        return embedder.embed_file(input_path, output_path, **embed_file_arguments)
    if not rearrange and suffix in (".hdf5", ".h5"):
        return embedder.embed_file(input_path, output_path, **embed_file_arguments)
    if output_path.exists():
        raise FileExistsError(f"{output_path} already exists; remove it or choose another output name")
    if use_sentence_keys:
        _check_unique_lines(input_path, output_path)
    # Written under a name ending in .hdf5 (which also holds the resumable run), renamed once rearranged.
    work_path = output_path.with_name(output_path.name + ".incomplete.hdf5")
    summary = embedder.embed_file(input_path, work_path, **embed_file_arguments)
    if _rank_and_world_size()[0] == 0:
        _rearrange_keys(work_path, input_path, forget_sentences, use_sentence_keys)
        os.replace(work_path, output_path)
    return summary


def _input_path(input_file: str | os.PathLike[str] | IO[str]) -> tuple[str, str | None]:
    """(a path to read, a temporary file to delete or None) for a path or an open text file."""
    if isinstance(input_file, (str, os.PathLike)):
        return str(input_file), None
    name = getattr(input_file, "name", None)
    if isinstance(name, str) and os.path.isfile(name):
        return name, None
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as copy:
        shutil.copyfileobj(input_file, copy)
    return copy.name, copy.name


def _read_lines(input_path: str | os.PathLike[str]) -> list[str]:
    with open(input_path, encoding="utf-8", newline="\n") as text:
        return [line.strip() for line in text]


def _check_unique_lines(input_path: str | os.PathLike[str], output_path: str | os.PathLike[str]) -> None:
    seen: set[str] = set()
    for line in _read_lines(input_path):
        if line in seen:
            raise UserInputError(
                f"{input_path}: the line {line!r} appears twice; with --use-sentence-keys (use_sentence_keys) every "
                f"line names its dataset in {output_path}, so lines must be unique"
            )
        seen.add(line)


def _rearrange_keys(
    path: str | os.PathLike[str], input_path: str | os.PathLike[str], forget_sentences: bool, use_sentence_keys: bool
) -> None:
    """Rename the datasets "0", "1", ... of `path` to their lines and drop `sentence_to_index` (links only: the
    vectors are not copied)."""
    h5py = _import_h5py()
    with h5py.File(path, "r+") as output:
        if (forget_sentences or use_sentence_keys) and "sentence_to_index" in output:
            del output["sentence_to_index"]
        if use_sentence_keys:
            lines = _read_lines(input_path)
            # Through a scratch group, so that a line such as "3" never meets the dataset still called "3".
            output.create_group(".renaming")
            for index in range(len(lines)):
                output.move(str(index), f".renaming/{index}")
            for index, line in enumerate(lines):
                output.move(f".renaming/{index}", line)
            del output[".renaming"]


def _write_in_order(
    embedder: ElmoEmbedder,
    input_path: str,
    output_path: str | os.PathLike[str],
    output_format: str,
    batch_size: int,
    forget_sentences: bool,
    use_sentence_keys: bool,
) -> None:
    """0.9's `embed_file` loop: the lines in order, `batch_size` at a time (the stateful path)."""
    h5py = _import_h5py()
    output_path = Path(output_path)
    if output_path.exists():
        raise FileExistsError(f"{output_path} already exists; remove it or choose another output name")
    lines = _read_lines(input_path)
    empty = [index for index, line in enumerate(lines) if not line]
    if empty:
        raise UserInputError(f"{input_path}: empty lines at indexes {empty[:5]}; remove them")
    if use_sentence_keys:
        _check_unique_lines(input_path, output_path)
    work_path = output_path.with_name(output_path.name + ".incomplete.hdf5")
    sentence_to_index: dict[str, str] = {}
    with h5py.File(work_path, "w") as output:
        vectors = embedder.embed_sentences([line.split() for line in lines], batch_size)
        for index, (line, array) in enumerate(zip(lines, vectors)):
            key = line if use_sentence_keys else str(index)
            sentence_to_index[line] = key
            if output_format == "top":
                array = array[-1]
            elif output_format == "average":
                array = np.average(array, axis=0)
            output.create_dataset(key, array.shape, dtype="float32", data=array)
        if not (forget_sentences or use_sentence_keys):
            output.create_dataset("sentence_to_index", data=[json.dumps(sentence_to_index)], dtype=h5py.string_dtype())
    os.replace(work_path, output_path)


__all__ = [
    "Elmo",
    "ElmoEmbedder",
    "ElmoTokenEmbedder",
    "batch_to_ids",
    "embed_file_in_allennlp_layout",
    "load_elmo_model",
    "remove_sentence_boundaries",
]
