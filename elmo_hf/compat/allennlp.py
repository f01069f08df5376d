"""allennlp's ELMo interface on elmo-hf: `Elmo` and `batch_to_ids` (allennlp 2.10.1) and `ElmoEmbedder` (allennlp 0.9).

    from elmo_hf.compat.allennlp import Elmo, ElmoEmbedder, batch_to_ids   # was: from allennlp.modules.elmo import ...

    elmo = Elmo(options_file, weight_file, num_output_representations=1)   # the published options.json + .hdf5
    output = elmo(batch_to_ids([["The", "cat", "."], ["Hi"]]))
    output["elmo_representations"][0]   # (2, 3, 1024); output["mask"]: (2, 3) bool

Same names, arguments, defaults and outputs as allennlp, equal to allennlp 2.10.1's numbers within 1e-5 (tests
against its stored outputs). `options_file`/`weight_file` take the published pair (local paths, or their URLs, which
are downloaded once), converted on first use by `elmo_hf.original_tf.convert_hdf5` (checked against bilm-tf's
arithmetic) and cached under `~/.cache/elmo_hf/allennlp/` by the files' content hash; or `options_file` names a
converted elmo-hf checkpoint (a folder or Hub name) and `weight_file` is None.

One difference, on purpose: allennlp's biLM carries its LSTM state from one call to the next, so a sentence's vectors
depend on what ran before it. Here `stateful=False` is the default (vectors depend only on the sentence);
`stateful=True` restores allennlp's behaviour exactly, batches of changing size included (row i continues row i).
The biLM math is `ElmoModel`'s, the mix is `ElmoScalarMix`, the cached vocabulary is `ElmoTokenCache`.
"""

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..char_ids import word_to_char_ids
from ..embedder import ElmoEmbedder as _Embedder
from ..embedder import ElmoTokenCache, _import_h5py, _rank_and_world_size
from ..modeling_elmo import ElmoModel, ElmoScalarMix
from ..user_errors import UserInputError

logger = logging.getLogger(__name__)

BOS_TOKEN, EOS_TOKEN = "<S>", "</S>"
MAX_CHARACTERS = 50  # allennlp's ELMoCharacterMapper.max_word_length
DEFAULT_BATCH_SIZE = 64  # allennlp 0.9's elmo command and ElmoEmbedder
OUTPUT_FORMATS = ("all", "top", "average")


def batch_to_ids(batch):
    """Character ids of tokenized sentences, as allennlp's `batch_to_ids`.

    Args:
        batch (list of lists of str): tokenized sentences.

    Returns:
        `torch.LongTensor` of shape `(len(batch), longest sentence, 50)`: each word's 50 character ids (bilm-tf's,
        shifted by +1), padding words all zeros.
    """
    longest = max((len(sentence) for sentence in batch), default=0)
    ids = torch.zeros(len(batch), longest, MAX_CHARACTERS, dtype=torch.long)
    for row, sentence in enumerate(batch):
        if sentence:
            ids[row, : len(sentence)] = torch.tensor([word_to_char_ids(word, MAX_CHARACTERS) for word in sentence])
    return ids


# ---- loading: the published pair, converted once and cached, or a converted checkpoint ----


def cache_dir():
    """Where converted pairs are kept: $ELMO_HF_CACHE, else $XDG_CACHE_HOME/elmo_hf, else ~/.cache/elmo_hf; then
    `allennlp/`."""
    root = os.environ.get("ELMO_HF_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "elmo_hf"
    )
    return os.path.join(root, "allennlp")


def load_elmo_model(options_file, weight_file):
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


def _local(path, name):
    """A local path for `path`; a URL is downloaded once (resumed when broken): a published model's file where
    `elmo-hf convert --published` keeps it, any other under `urls/`."""
    if not path.startswith(("http://", "https://")):
        return path
    from ..published import PUBLISHED_MODELS, default_download_dir, download

    filename = path.rsplit("/", 1)[-1] or name
    folder = os.path.join("urls", hashlib.sha256(path.encode("utf-8")).hexdigest()[:16])
    for model in PUBLISHED_MODELS:
        if path in model.urls():
            folder = model.name
    return download(path, os.path.join(default_download_dir(), folder, filename))


def _content_digest(*paths):
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def _convert_into(options_file, weight_file, folder):
    """Convert and verify the pair (elmo_hf.original_tf, as `elmo-hf convert`), then move it to `folder` whole."""
    from ..convert_bilm_tf import convert_hdf5

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


# ---- the biLM with allennlp's sentence boundaries ----


def _boundary_ids(device):
    return torch.tensor([word_to_char_ids(token, MAX_CHARACTERS) for token in (BOS_TOKEN, EOS_TOKEN)], device=device)


def _with_boundaries(char_ids):
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


def _without_boundaries(tensor, mask):
    """allennlp's `remove_sentence_boundaries`: (batch, words + 2, ...) -> (batch, words, ...), padding zero."""
    lengths = mask.sum(dim=1) - 2  # (batch,)
    new_mask = torch.arange(tensor.shape[1] - 2, device=tensor.device) < lengths.unsqueeze(1)  # (batch, words)
    inner = tensor[:, 1:-1]
    return inner.masked_fill(~new_mask.view(*new_mask.shape, *[1] * (inner.dim() - 2)), 0.0), new_mask


class _BiLmRunner:
    """Runs `ElmoModel` on allennlp-style character ids (no boundaries), carrying the LSTM state when stateful."""

    def __init__(self, stateful):
        self.stateful = stateful
        self.lstm_states = None

    def __call__(self, model, char_ids, token_cache=None):
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


def _check_stateful(stateful):
    if not isinstance(stateful, bool):
        raise UserInputError(f"stateful: must be True or False, got {stateful!r}")


class Elmo(nn.Module):
    r"""
    allennlp's `Elmo`: `num_output_representations` learned mixes of the biLM's layers (eq. 1 of the paper).

    Args:
        options_file (str): the published options.json (path or URL), or a converted elmo-hf checkpoint (a folder or
            Hub name) with `weight_file=None`.
        weight_file (str): the published weights .hdf5 (path or URL); None with a checkpoint.
        num_output_representations (int): how many mixes (each with its own weights and gamma) to return.
        requires_grad (bool, defaults to False): fine-tune the biLM's parameters too.
        do_layer_norm (bool, defaults to False): normalise each layer before mixing (over the real positions,
            boundaries included, as allennlp).
        dropout (float, defaults to 0.5): dropout on each representation (in training mode only).
        vocab_to_cache (list of str, optional): words whose character-CNN vectors are computed once; `forward` then
            takes `word_inputs`, indices into this list (index 0 is padding).
        keep_sentence_boundaries (bool, defaults to False): keep the `<S>`/`</S>` positions: `words + 2` per row.
        scalar_mix_parameters (list of floats, optional): fixed (not trained) un-normalised layer weights.
        module (optional): allennlp's replacement biLM module; not supported (raises).
        stateful (bool, defaults to False): carry the LSTM state from one call to the next as allennlp did (row i
            continues row i; `reset_states()` forgets it). False: every call starts from zeros.
    """

    def __init__(
        self,
        options_file,
        weight_file,
        num_output_representations,
        requires_grad=False,
        do_layer_norm=False,
        dropout=0.5,
        vocab_to_cache=None,
        keep_sentence_boundaries=False,
        scalar_mix_parameters=None,
        module=None,
        stateful=False,
    ):
        super().__init__()
        if module is not None:
            raise UserInputError(
                "module: not supported: it replaces the biLM with an allennlp module, which only allennlp can run; "
                "pass options_file and weight_file (or a converted elmo-hf checkpoint)"
            )
        count = num_output_representations
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise UserInputError(f"num_output_representations: must be a positive int, got {count!r}")
        if not (isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0):
            raise UserInputError(f"dropout: must be a probability in [0, 1), got {dropout!r}")
        if requires_grad and vocab_to_cache:
            raise UserInputError(
                "vocab_to_cache: cannot be combined with requires_grad=True here: the cached vectors are fixed "
                "(allennlp trained them as a separate table, a mode its own warning calls not well defined)"
            )
        _check_stateful(stateful)
        self.bilm = load_elmo_model(options_file, weight_file)
        self.bilm.requires_grad_(bool(requires_grad))
        self.bilm.train(False)  # the biLM has no dropout of its own; train() reaches it but changes nothing
        num_layers = self.bilm.config.num_lstm_layers + 1
        if scalar_mix_parameters is not None and len(scalar_mix_parameters) != num_layers:
            raise UserInputError(
                f"scalar_mix_parameters: needs {num_layers} values (the token layer and "
                f"{num_layers - 1} LSTM layers), got {len(scalar_mix_parameters)}: {scalar_mix_parameters!r}"
            )
        self._scalar_mixes = []
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
        self._runner = _BiLmRunner(stateful)
        self._token_cache = None
        if vocab_to_cache:
            words = [str(word) for word in vocab_to_cache]
            vocabulary_ids = torch.tensor([word_to_char_ids(word, MAX_CHARACTERS) for word in words])  # (V, 50)
            self.register_buffer("_vocabulary_char_ids", vocabulary_ids, persistent=False)
            with torch.no_grad():
                self._token_cache = ElmoTokenCache(
                    self.bilm.character_encoder, torch.cat([_boundary_ids("cpu"), vocabulary_ids])
                )

    @property
    def stateful(self):
        return self._runner.stateful

    def get_output_dim(self):
        """The width of each representation: `2 * projection_dim`."""
        return 2 * self.bilm.config.projection_dim

    def reset_states(self):
        """Forget the carried LSTM state (stateful mode): the next call starts from zeros."""
        self._runner.lstm_states = None

    def forward(self, inputs, word_inputs=None):
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
        original_shape = inputs.size()
        char_ids = inputs.view(-1, *original_shape[-2:]) if len(original_shape) > 3 else inputs
        if word_inputs is not None:
            original_word_size = word_inputs.size()
            if self._token_cache is None:
                logger.warning("Word inputs were passed to ELMo but it does not have a cached vocab.")
            else:
                char_ids = self._cached_word_char_ids(word_inputs.reshape(-1, original_word_size[-1]), char_ids)
        layers, mask_with_boundaries = self._runner(self.bilm, char_ids, self._token_cache)
        representations = []
        for mix in self._scalar_mixes:
            mixed = mix(layers, mask_with_boundaries)  # (batch, words + 2, dim)
            if self._keep_sentence_boundaries:
                representation, mask = mixed, mask_with_boundaries
            else:
                representation, mask = _without_boundaries(mixed, mask_with_boundaries)
            representations.append(self._dropout(representation))
        if word_inputs is not None and len(original_word_size) > 2:
            leading = tuple(original_word_size)
        elif len(original_shape) > 3:
            leading = tuple(original_shape[:-1])
        else:
            return {"elmo_representations": representations, "mask": mask}
        return {
            "elmo_representations": [representation.view(*leading, -1) for representation in representations],
            "mask": mask.view(leading),
        }

    def _cached_word_char_ids(self, word_ids, char_ids):
        """The character ids of cached words (padding, id 0, all zeros). As allennlp, an id outside the vocabulary
        falls back to the character ids given in `inputs`."""
        vocabulary = self._vocabulary_char_ids
        if word_ids.numel() and (int(word_ids.min()) < 0 or int(word_ids.max()) >= vocabulary.shape[0]):
            logger.warning("word_inputs hold ids outside vocab_to_cache; running the character CNN on inputs instead")
            return char_ids
        return vocabulary[word_ids] * (word_ids > 0).unsqueeze(-1)  # (batch, words, 50)


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

    def __init__(self, options_file=None, weight_file=None, cuda_device=-1, stateful=False):
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
            from ..published import published_model

            options_file, weight_file = published_model("original").urls()
        self.cuda_device = cuda_device
        self.embedder = _Embedder(load_elmo_model(options_file, weight_file), device=device)
        self._runner = _BiLmRunner(stateful)

    @property
    def stateful(self):
        return self._runner.stateful

    def reset_states(self):
        """Forget the carried LSTM state (stateful mode)."""
        self._runner.lstm_states = None

    @torch.inference_mode()
    def batch_to_embeddings(self, batch):
        """
        Args:
            batch (list of lists of str): tokenized sentences.

        Returns:
            (activations `(batch, layers, words, dim)`, mask `torch.LongTensor` `(batch, words)`), without `<S>`/`</S>`.
        """
        char_ids = batch_to_ids(batch).to(self.embedder.device)
        layers, mask = self._runner(self.embedder.model, char_ids, self.embedder.token_cache)
        without = [_without_boundaries(layer.float(), mask) for layer in layers]
        return torch.stack([layer for layer, _ in without], dim=1), without[0][1].long()

    def embed_sentence(self, sentence):
        """One tokenized sentence -> float32 array `(layers, words, dim)`."""
        return self.embed_batch([sentence])[0]

    def embed_batch(self, batch):
        """Tokenized sentences -> a list of float32 arrays `(layers, words, dim)`; an empty sentence gives
        `(layers, 0, dim)`."""
        if not batch:
            return []
        if not self.stateful and all(batch):
            return self.embedder.embed_sentences(batch, layers="all", batch_size=len(batch))
        if all(not sentence for sentence in batch):
            return [self._empty() for _ in batch]
        activations, mask = self.batch_to_embeddings(batch)
        lengths = mask.sum(dim=1).tolist()
        return [
            activations[row, :, :length].cpu().numpy() if length else self._empty()
            for row, length in enumerate(lengths)
        ]

    def embed_sentences(self, sentences, batch_size=DEFAULT_BATCH_SIZE):
        """Yield `embed_batch`'s arrays for an iterable of tokenized sentences, in input order, `batch_size` at a time
        (stateless: sentences are grouped by length within each 1000, which gives the same vectors faster)."""
        group = batch_size if self.stateful else max(batch_size, 1000)
        pending = []
        for sentence in sentences:
            pending.append(sentence)
            if len(pending) == group:
                yield from self._embed_group(pending, batch_size)
                pending = []
        if pending:
            yield from self._embed_group(pending, batch_size)

    def _embed_group(self, sentences, batch_size):
        if self.stateful or not all(sentences):
            for start in range(0, len(sentences), batch_size):
                yield from self.embed_batch(sentences[start : start + batch_size])
        else:
            yield from self.embedder.embed_sentences(sentences, layers="all", batch_size=batch_size)

    def embed_file(
        self,
        input_file,
        output_file_path,
        output_format="all",
        batch_size=DEFAULT_BATCH_SIZE,
        forget_sentences=False,
        use_sentence_keys=False,
    ):
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

    def _empty(self):
        return np.zeros((self.embedder.num_layers, 0, 2 * self.embedder.model.config.projection_dim), np.float32)


# ---- allennlp's hdf5 layout ----


def embed_file_in_allennlp_layout(
    embedder, input_path, output_path, forget_sentences=False, use_sentence_keys=False, **embed_file_arguments
):
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


def _input_path(input_file):
    """(a path to read, a temporary file to delete or None) for a path or an open text file."""
    if isinstance(input_file, (str, os.PathLike)):
        return str(input_file), None
    name = getattr(input_file, "name", None)
    if isinstance(name, str) and os.path.isfile(name):
        return name, None
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as copy:
        shutil.copyfileobj(input_file, copy)
    return copy.name, copy.name


def _read_lines(input_path):
    with open(input_path, encoding="utf-8", newline="\n") as text:
        return [line.strip() for line in text]


def _check_unique_lines(input_path, output_path):
    seen = set()
    for line in _read_lines(input_path):
        if line in seen:
            raise UserInputError(
                f"{input_path}: the line {line!r} appears twice; with --use-sentence-keys (use_sentence_keys) every "
                f"line names its dataset in {output_path}, so lines must be unique"
            )
        seen.add(line)


def _rearrange_keys(path, input_path, forget_sentences, use_sentence_keys):
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


def _write_in_order(embedder, input_path, output_path, output_format, batch_size, forget_sentences, use_sentence_keys):
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
    sentence_to_index = {}
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


__all__ = ["Elmo", "ElmoEmbedder", "batch_to_ids", "embed_file_in_allennlp_layout", "load_elmo_model"]
