"""Contextual ELMo vectors at scale: lists of sentences in memory, files of any size on disk.

[`ElmoEmbedder`] batches sentences by length, runs [`ElmoModel`] and returns one array per sentence without the
`<S>`/`</S>` boundaries. `ElmoEmbedder.embed_file` streams a file with one sentence per line into `.hdf5` or `.npz`
in bounded memory: finished chunks are kept in `OUTPUT.partial/` so that an interrupted run resumes where it stopped,
and OUTPUT itself appears, by an atomic rename, only once it is complete; under torchrun or `accelerate launch`
the processes share the chunks. `ElmoEmbedder.embed_dataset` adds the vectors to a `datasets.Dataset` as a column.
[`ElmoTokenCache`] replaces the character encoder by a table lookup for the words of a known vocabulary.
"""

import collections
import concurrent.futures
import contextlib
import errno
import functools
import hashlib
import itertools
import json
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from ..hub.shipped_models import DEFAULT_MODEL, shipped_model_path
from ..model.modeling_elmo import ElmoModel
from ..model.tokenization_elmo import ElmoTokenizer
from ..model.weight_cache import derived_copy, weights_held
from ..user_errors import UnwritableOutputError

LAYER_CHOICES = ("all", "top", "average", "mix")
OUTPUT_FORMATS = {".hdf5": "hdf5", ".h5": "hdf5", ".npz": "npz"}
# Bumped whenever the files in OUTPUT.partial/ change meaning, so that an old partial run is never resumed.
PARTIAL_FORMAT_VERSION = 1


class ElmoTokenCache(nn.Module):
    r"""
    The character encoder's output for a fixed vocabulary, computed once and then looked up. Passed to
    [`ElmoModel`] as `token_cache`, it stands in for [`ElmoCharacterEncoder`] during that call only (same input, same
    output): known words are read from the table, the others still go through `character_encoder`. This is what
    bilm-tf's `dump_token_embeddings` and allennlp's `vocab_to_cache` did.
    The vectors equal the encoder's up to float rounding (the encoder's own output for a word varies by that much
    with the batch it is computed in). For inference: the table carries no gradient. The table follows the encoder's
    weights: whenever their values or dtype change, however they were changed, the next call computes it again
    (the rule of `weight_cache.py`).

    Args:
        character_encoder (`ElmoCharacterEncoder`): the encoder whose outputs are cached; it also encodes unknown words.
        vocabulary_char_ids (`torch.LongTensor` of shape `(vocabulary, max_characters_per_token)`): the words to cache,
            as character ids from [`ElmoTokenizer`] (duplicates are fine).
        batch_size (int, defaults to 4096): words encoded at once while filling the table.
    """

    def __init__(self, character_encoder, vocabulary_char_ids, batch_size=4096):
        super().__init__()
        if vocabulary_char_ids.dim() != 2 or vocabulary_char_ids.shape[0] == 0:
            raise ValueError(
                "vocabulary_char_ids must have shape (vocabulary, max_characters_per_token) with at least one word, "
                f"got {tuple(vocabulary_char_ids.shape)}"
            )
        self.character_encoder = character_encoder
        device = next(character_encoder.parameters()).device
        char_ids = torch.unique(vocabulary_char_ids.to(device), dim=0)  # (entries, chars)
        # Random positive weights below 2**40 keep every key (a weighted sum of ids < 262) inside int64.
        generator = torch.Generator().manual_seed(0)
        hash_weights = torch.randint(1, 2**40, (char_ids.shape[1],), generator=generator)
        self.register_buffer("hash_weights", hash_weights.to(device), persistent=False)
        keys, order = torch.sort(self._keys(char_ids))
        self.register_buffer("keys", keys, persistent=False)
        self.register_buffer("char_ids", char_ids[order], persistent=False)
        self.batch_size = batch_size
        self.table()  # computed now, not at the first call

    def table(self):
        """The encoder's output for every cached word `(entries, projection_dim)`, computed again when the encoder's
        weights differ from those it was computed with."""
        sources = [*self.character_encoder.parameters(), *self.character_encoder.buffers()]  # int8 weights too
        return derived_copy(self, "table", sources, self._encode_entries)

    def _encode_entries(self):
        with torch.no_grad():
            return torch.cat([self.character_encoder(rows) for rows in self.char_ids.split(self.batch_size)])

    def _keys(self, char_ids):
        return (char_ids * self.hash_weights).sum(dim=-1)  # (words,)

    def forward(self, char_ids):
        """char_ids: (..., max_characters_per_token) -> (..., projection_dim)."""
        if char_ids.dim() != 2:
            return self(char_ids.flatten(0, -2)).view(*char_ids.shape[:-1], -1)  # via (words, chars)
        slots = torch.searchsorted(self.keys, self._keys(char_ids)).clamp(max=self.keys.shape[0] - 1)  # (words,)
        # The slot's characters are compared in full: a hash collision is a miss, never a wrong vector.
        known = (self.char_ids[slots] == char_ids).all(dim=-1)  # (words,)
        output = self.table()[slots]  # (words, projection_dim), a copy
        if not bool(known.all()):
            output[~known] = self.character_encoder(char_ids[~known]).to(output.dtype)
        return output


class ElmoEmbedder:
    r"""
    Contextual ELMo vectors for tokenized sentences as float32 numpy arrays, without the `<S>`/`</S>` positions
    (the arrays allennlp's `ElmoEmbedder` returned).

    Args:
        model (`ElmoModel`): the biLM. It is put in eval mode and moved to `device` and `dtype` in place.
        tokenizer (`ElmoTokenizer`, optional): defaults to one for `model.config.max_characters_per_token`.
        device (str or `torch.device`, optional): where the model runs; where it already is when None.
        dtype (`torch.dtype`, optional): the dtype it computes in; its current dtype when None. The returned arrays
            are float32 whatever the compute dtype.
        quantize (str, optional): "int8" runs the LSTM's per-step products with int8 weights (CPU, float32 model:
            `ElmoModel.quantize_weights`), faster for one sentence at a time; vectors then deviate slightly from
            float32 and depend slightly on their batch-mates (`docs/speed.md`).

    Attribute `prefetch` (None, True or False): tokenize the next batches in a background thread while the model runs
    the current one, and copy each batch to the device from pinned memory without waiting; None (the default) does so
    on a CUDA device only. The vectors are the same either way.
    """

    prefetch = None

    def __init__(self, model, tokenizer=None, device=None, dtype=None, quantize=None):
        if not isinstance(model, ElmoModel):
            raise ValueError(f"model must be an ElmoModel, got {type(model).__name__}")
        self.model = model.to(device=device, dtype=dtype).eval()
        if quantize is not None:
            self.model.quantize_weights(quantize)
        if tokenizer is None:
            if model.config.char_vocabulary == "lexicon":
                raise ValueError("the model reads a character lexicon: pass its ElmoTokenizer (from_pretrained)")
            tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
        self.tokenizer = tokenizer
        self.token_cache = None

    @classmethod
    def from_pretrained(cls, name_or_path=None, device=None, dtype=None, quantize=None):
        """An embedder for a checkpoint folder, Hub name or shipped model's name (`elmo_hf.SHIPPED_MODELS`; default:
        `elmo_hf.DEFAULT_MODEL`); the tokenizer follows the checkpoint's config."""
        name_or_path = shipped_model_path(name_or_path or DEFAULT_MODEL)
        model = ElmoModel.from_pretrained(name_or_path)
        # A character lexicon (a model converted from ELMoForManyLangs) is the checkpoint's own tokenizer files.
        lexicon = model.config.char_vocabulary == "lexicon"
        tokenizer = ElmoTokenizer.from_pretrained(name_or_path) if lexicon else None
        return cls(model, tokenizer=tokenizer, device=device, dtype=dtype, quantize=quantize)

    @property
    def device(self):
        return self.model.device

    @property
    def num_layers(self):
        """Layers per word: the token layer and every LSTM layer."""
        return self.model.config.num_lstm_layers + 1

    def set_token_cache(self, words, batch_size=4096):
        """Precompute the character encoder's output for `words` (strings) and the sentence boundaries, and look them
        up from now on; `None` removes the cache. Build it after the model has reached its final device and dtype."""
        if words is None:
            self.token_cache = None
            return
        words = list(words)
        if not words:
            raise ValueError("set_token_cache needs at least one word (or None to remove the cache)")
        # Every sentence has the boundaries: cache them too.
        words = [self.tokenizer.bos_token, self.tokenizer.eos_token, *words]
        char_ids = torch.tensor(self.tokenizer.convert_tokens_to_ids(words), device=self.device)  # (words, chars)
        self.token_cache = ElmoTokenCache(self.model.character_encoder, char_ids, batch_size)

    def embed_sentence(self, words, **kwargs):
        """The array of one tokenized sentence; keyword arguments as for `embed_sentences`."""
        return self.embed_sentences([words], **kwargs)[0]

    def embed_sentences(
        self,
        sentences,
        layers="all",
        mix_weights=None,
        sentence_vectors=False,
        batch_size=64,
        max_tokens_per_batch=None,
        boundaries=False,
        progress=False,
    ):
        r"""
        Args:
            sentences (list of lists of str): tokenized sentences, each with at least one word.
            layers (str, defaults to "all"): "all" keeps every layer (the token layer, then each LSTM layer); "top"
                the last LSTM layer; "average" the mean of the layers; "mix" their sum weighted by `mix_weights`.
            mix_weights (list of floats, one per layer): the weights for `layers="mix"`, used as given (no softmax).
            sentence_vectors (bool, defaults to False): average over the words, one vector per sentence.
            batch_size (int, defaults to 64): sentences per model call at most.
            max_tokens_per_batch (int, optional): padded positions per model call at most (sentences times the
                longest one's length, boundaries included); a sentence longer than that runs alone.
            boundaries (bool, defaults to False): keep the `<S>` and `</S>` positions: `words + 2` of them per
                sentence (`sentence_vectors` then averages over them too).
            progress (bool or str, defaults to False): show a progress bar on stderr (a string names it).

        Returns:
            a list with one float32 array per sentence, in input order, of shape `(layers, words, 2 * projection_dim)`
            for "all" and `(words, 2 * projection_dim)` otherwise; `sentence_vectors` drops the `words` axis.
        """
        options = {
            "layers": layers,
            "mix_weights": mix_weights,
            "sentence_vectors": sentence_vectors,
            "boundaries": boundaries,
        }
        description = progress if isinstance(progress, str) else "embedding"
        with _ProgressBar(len(sentences), description, enabled=bool(progress)) as bar:
            return self._embed_in_input_order(sentences, options, batch_size, max_tokens_per_batch, bar.update)

    def embed_file(
        self,
        input_path,
        output_path,
        tokenize=False,
        layers="all",
        mix_weights=None,
        sentence_vectors=False,
        batch_size=64,
        max_tokens_per_batch=None,
        chunk_size=1000,
        resume=False,
        progress=True,
    ):
        r"""
        Embed a text file with one sentence per line into `output_path`, with memory bounded by `chunk_size`.

        The output holds one dataset per line, named by the line's index ("0", "1", ...), shaped as
        `embed_sentences` returns, plus `sentence_to_index`: a JSON object from each (stripped) line to its index,
        the layout allennlp's `elmo` command wrote. While running, finished chunks are kept in
        `output_path + ".partial/"`; `output_path` appears by an atomic rename only when complete, so a file at
        that name is never half-written. The last step copies the chunks into it, so the disk must hold the output
        twice for a moment.

        In a `torch.distributed` process group (torchrun, `accelerate launch`; `elmo-hf embed` joins the one their
        environment describes), every process calls this with the same arguments: the chunks still to do are dealt
        out in turn, each process writes its finished chunks into the same `OUTPUT.partial/` (a filesystem all of
        them see), and after a barrier the first process assembles OUTPUT in input order. A chunk's vectors do not
        depend on which process computed it, so the file is byte-identical to a one-process run on the same device
        and thread count, and `resume` works with any number of processes.

        Args:
            input_path (str or Path): UTF-8 text, one sentence per line; an empty line is an error.
            output_path (str or Path): ending in `.hdf5`/`.h5` (needs h5py) or `.npz`; must not exist yet.
            tokenize (bool, defaults to False): split raw text with the tokenizer instead of on whitespace.
            layers, mix_weights, sentence_vectors, batch_size, max_tokens_per_batch: as for `embed_sentences`.
            chunk_size (int, defaults to 1000): lines embedded, held in memory and saved together; sentences are
                sorted by length within a chunk. A resumed run must use the same value.
            resume (bool, defaults to False): continue the unfinished run left in `output_path + ".partial/"`,
                skipping its saved chunks. The settings that change the vectors must be the same as before.
            progress (bool, defaults to True): show a progress bar on stderr.

        Returns:
            a dict with `sentences` and `tokens` embedded by this call (by all processes; resumed chunks not counted)
            and `seconds`.
        """
        output_path, output_format = _checked_file_arguments(input_path, output_path, chunk_size)
        options = {"layers": layers, "mix_weights": mix_weights, "sentence_vectors": sentence_vectors}
        self._layer_weights(layers, mix_weights)  # fail on bad settings before reading the input
        line_count, input_digest = _scan_input(input_path)
        settings = {  # what a resumed run must share with the unfinished one (OUTPUT.partial/manifest.json)
            "format_version": PARTIAL_FORMAT_VERSION,
            "input_sha256": input_digest,
            "input_lines": line_count,
            "model_sha256": _model_digest(self.model),
            "dtype": str(self.model.dtype),
            "lstm_weight_quantization": self.model.encoder.weight_quantization,
            "max_characters_per_token": self.tokenizer.max_characters_per_token,
            "tokenize": tokenize,
            "layers": layers,
            "mix_weights": None if mix_weights is None else [float(weight) for weight in mix_weights],
            "sentence_vectors": sentence_vectors,
            "chunk_size": chunk_size,
            "output_format": output_format,
        }
        work_dir = output_path.with_name(output_path.name + ".partial")
        with _output_faults(output_path, work_dir):
            finished = _on_first_process(lambda: _open_work_dir(work_dir, settings, resume))
        rank, world_size = _rank_and_world_size()
        chunk_count = -(-line_count // chunk_size)
        pending = [chunk for chunk in range(chunk_count) if chunk not in finished]
        mine = set(pending[rank::world_size])  # this process's share, dealt in turn

        start = time.monotonic()
        lines_to_do = sum(min(chunk_size, line_count - chunk * chunk_size) for chunk in mine)
        description = "embedding" if world_size == 1 else f"embedding (process 0 of {world_size})"
        with _ProgressBar(lines_to_do, description, enabled=progress and rank == 0) as bar:
            lines_read = 0
            for chunk, lines in enumerate(_read_chunks(input_path, chunk_size)):
                lines_read += len(lines)
                if chunk in mine:
                    sentences = [self.tokenizer.tokenize(line) if tokenize else line.split() for line in lines]
                    arrays = self._embed_in_input_order(
                        sentences, options, batch_size, max_tokens_per_batch, on_batch=bar.update
                    )
                    mine.discard(chunk)
                    # about this chunk's bytes for each chunk still to save and for each in the assembled output
                    needed = sum(array.nbytes for array in arrays) * (1 + len(mine) + chunk_count)
                    with _output_faults(output_path, work_dir, needed):
                        _write_chunk(work_dir, chunk, chunk * chunk_size, arrays)
                    del arrays  # freed before the next chunk's are made
        if lines_read != line_count:
            raise ValueError(f"{input_path} changed while it was read: {line_count} lines at first, then {lines_read}")
        sentences_done, tokens_done = _sum_over_processes(bar.sentences, bar.tokens)  # also waits for every chunk
        needed = sum(path.stat().st_size for path in work_dir.glob("chunk-*.npz"))  # about the output's size
        with _output_faults(output_path, work_dir, needed):
            _on_first_process(lambda: _assemble(work_dir, output_path, output_format, input_path, chunk_size))
        return {"sentences": sentences_done, "tokens": tokens_done, "seconds": time.monotonic() - start}

    def embed_dataset(
        self,
        dataset,
        column="tokens",
        output_column="elmo",
        layers="all",
        mix_weights=None,
        sentence_vectors=False,
        batch_size=64,
        max_tokens_per_batch=None,
        map_batch_size=1000,
        split_by_process=True,
    ):
        r"""
        A `datasets.Dataset` with the ELMo vectors of each row's tokens in a new column, through `Dataset.map`
        (batched: the sentences of each map batch are sorted by length and run `batch_size` at a time).

        Args:
            dataset (`datasets.Dataset`): rows with a list of words in `column`.
            column (str, defaults to "tokens"): the column holding each sentence's words.
            output_column (str, defaults to "elmo"): the new column; each value is what `embed_sentences` returns
                for the row, e.g. `(layers, words, 2 * projection_dim)` for `layers="all"` (read it back as arrays
                with `dataset.with_format("numpy")`).
            layers, mix_weights, sentence_vectors, batch_size, max_tokens_per_batch: as for `embed_sentences`.
            map_batch_size (int, defaults to 1000): rows handed to each call of the map function.
            split_by_process (bool, defaults to True): under torchrun or `accelerate launch` (a `torch.distributed`
                group, or the `RANK`/`WORLD_SIZE` variables they set), keep only this process's share of the rows,
                with `datasets.distributed.split_dataset_by_node`, so that the processes embed the dataset together.

        Returns:
            the (possibly split) dataset with `output_column` added.
        """
        if column not in dataset.column_names:
            raise ValueError(f"dataset has no column {column!r}; its columns are {dataset.column_names}")
        if output_column in dataset.column_names:
            raise ValueError(f"dataset already has a column {output_column!r}: choose another output_column")
        self._layer_weights(layers, mix_weights)  # fail on bad settings before the first batch
        rank, world_size = _rank_and_world_size(from_environment=True)
        if split_by_process and world_size > 1:
            from datasets.distributed import split_dataset_by_node

            dataset = split_dataset_by_node(dataset, rank=rank, world_size=world_size)
        settings = [layers, mix_weights, sentence_vectors, column, output_column, str(self.model.dtype)]
        fingerprint = hashlib.sha256(
            f"{dataset._fingerprint}{_model_digest(self.model)}{json.dumps(settings)}".encode()
        ).hexdigest()

        options = {"layers": layers, "mix_weights": mix_weights, "sentence_vectors": sentence_vectors}

        def embed(rows):
            return {output_column: self._embed_in_input_order(rows[column], options, batch_size, max_tokens_per_batch)}

        # The fingerprint names the result for datasets' cache: without it, datasets would hash the model by pickling.
        return dataset.map(
            embed, batched=True, batch_size=map_batch_size, new_fingerprint=fingerprint[:32], desc="ELMo vectors"
        )

    def _layer_weights(self, layers, mix_weights):
        """(num_layers,) weights that mix the layers into one, or None to keep them all."""
        if layers not in LAYER_CHOICES:
            raise ValueError(f"layers must be one of {', '.join(LAYER_CHOICES)}; got {layers!r}")
        if (layers == "mix") != (mix_weights is not None):
            raise ValueError(
                f"mix_weights go with layers='mix' and only with it; got layers={layers!r}, mix_weights={mix_weights!r}"
            )
        if layers == "all":
            return None
        if layers == "top":
            weights = [0.0] * (self.num_layers - 1) + [1.0]
        elif layers == "average":
            weights = [1.0 / self.num_layers] * self.num_layers
        else:
            weights = [float(weight) for weight in mix_weights]
            if len(weights) != self.num_layers:
                raise ValueError(
                    f"mix_weights needs {self.num_layers} values (the token layer and {self.num_layers - 1} LSTM "
                    f"layers), got {len(weights)}: {mix_weights!r}"
                )
        return torch.tensor(weights, device=self.device)

    def _embed_in_input_order(self, sentences, options, batch_size, max_tokens_per_batch, on_batch=None):
        """The arrays of `sentences` (`embed_sentences`; `options`: its layers, mix_weights and sentence_vectors), in
        input order; `on_batch(sentences of the batch)` after each model call."""
        results = [None] * len(sentences)
        # Every batch of this call runs here, with nothing in between that could write a weight (`on_batch` is this
        # class's progress bar): the derived weight copies are checked at their first use in the call only.
        with weights_held():
            for indices, arrays in self._embed_batches(
                sentences, **options, batch_size=batch_size, max_tokens_per_batch=max_tokens_per_batch
            ):
                for index, array in zip(indices, arrays):
                    results[index] = array
                if on_batch is not None:
                    on_batch([sentences[index] for index in indices])
        return results

    @torch.inference_mode()
    def _embed_batches(
        self, sentences, layers, mix_weights, sentence_vectors, batch_size, max_tokens_per_batch, boundaries=False
    ):
        """Yield (indices into `sentences`, their arrays) one model call at a time, longest sentences first."""
        weights = self._layer_weights(layers, mix_weights)
        for index, words in enumerate(sentences):
            if not isinstance(words, (list, tuple)) or not words:
                raise ValueError(f"sentence {index} must be a non-empty list of words, got {words!r}")
        batches = length_batches([len(words) for words in sentences], batch_size, max_tokens_per_batch)
        prefetch = self.device.type == "cuda" if self.prefetch is None else self.prefetch
        for indices, encoded in _prefetched(batches, functools.partial(self._encode, sentences), prefetch):
            if prefetch and self.device.type == "cuda":  # pinned here, not in the thread: a graph capture forbids
                encoded = {key: value.pin_memory() for key, value in encoded.items()}  # CUDA calls in other threads
            input_ids, attention_mask = (
                encoded[key].to(self.device, non_blocking=prefetch) for key in ("input_ids", "attention_mask")
            )
            output = self._run_model(input_ids, attention_mask)
            hidden = torch.stack(output.hidden_states, dim=1).float()  # (batch, layers, longest + 2, dim)
            lengths = torch.tensor([len(sentences[index]) for index in indices], device=self.device)  # (batch,)
            if boundaries:
                lengths = lengths + 2  # the positions kept per row
            else:
                hidden = hidden[:, :, 1:]  # from the first word: (batch, layers, longest + 1, dim)
            if sentence_vectors:
                words = torch.arange(hidden.shape[2], device=self.device) < lengths.unsqueeze(1)  # (batch, positions)
                hidden = hidden.masked_fill(~words[:, None, :, None], 0.0).sum(dim=2)  # (batch, layers, dim)
                hidden = hidden / lengths[:, None, None]
            if weights is not None:
                hidden = torch.einsum("l,bl...->b...", weights, hidden)  # the layer axis mixed away
            hidden = hidden.cpu().numpy()
            if sentence_vectors:
                yield indices, [hidden[row].copy() for row in range(len(indices))]
            else:
                # The copies drop the padding (and </S> unless kept), and free the batch's buffer.
                yield indices, [hidden[row][..., :length, :].copy() for row, length in enumerate(lengths.tolist())]

    def _encode(self, sentences, indices):
        """The tokenizer's padded batch of `sentences[indices]` (CPU tensors)."""
        return self.tokenizer(
            [sentences[index] for index in indices], is_split_into_words=True, padding=True, return_tensors="pt"
        )

    def _run_model(self, input_ids, attention_mask):
        # The cache is an argument of this call only: the model is not modified, so threads may share it.
        return self.model(
            input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True, token_cache=self.token_cache
        )


def _prefetched(items, prepare, enabled, depth=2):
    """Yield `(item, prepare(item))` for each of `items`, in order; when `enabled`, `prepare` runs in one background
    thread up to `depth` items ahead of the consumer (its errors are raised here, at the item that raised them)."""
    if not enabled:
        for item in items:
            yield item, prepare(item)
        return
    items = iter(items)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="elmo-prefetch") as executor:
        pending = collections.deque()
        try:
            for item in itertools.islice(items, depth):
                pending.append((item, executor.submit(prepare, item)))
            while pending:
                item, future = pending.popleft()
                for following in itertools.islice(items, 1):
                    pending.append((following, executor.submit(prepare, following)))
                yield item, future.result()
        finally:
            for _, future in pending:  # a consumer that stops early: nothing more is prepared
                future.cancel()


def length_batches(lengths, batch_size, max_tokens_per_batch=None):
    """Split range(len(lengths)) into batches of similar lengths, longest first (a batch that would run out of memory
    fails at once). A batch has at most `batch_size` rows and, when given, at most `max_tokens_per_batch` padded
    positions, boundaries included; a single longer row makes a batch of its own."""
    _check_positive("batch_size", batch_size)
    if max_tokens_per_batch is not None:
        _check_positive("max_tokens_per_batch", max_tokens_per_batch)
    order = sorted(range(len(lengths)), key=lengths.__getitem__, reverse=True)
    batch = []
    for index in order:
        # Every row is padded to the batch's first, longest row, plus <S> and </S>.
        width = lengths[batch[0] if batch else index] + 2
        too_many_tokens = max_tokens_per_batch is not None and (len(batch) + 1) * width > max_tokens_per_batch
        if batch and (len(batch) == batch_size or too_many_tokens):
            yield batch
            batch = []
        batch.append(index)
    if batch:
        yield batch


def _rank_and_world_size(from_environment=False):
    """(this process's rank, the number of processes): from the `torch.distributed` group when there is one, else
    (with `from_environment`) from the RANK and WORLD_SIZE variables that torchrun and `accelerate launch` set."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if from_environment:
        return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    return 0, 1


def _on_first_process(work):
    """Run `work()` on process 0 of the group (or alone) and give every process its result, or its error."""
    rank, world_size = _rank_and_world_size()
    if world_size == 1:
        return work()
    outcome = [None]
    if rank == 0:
        try:
            outcome = [("result", work())]
        except (ValueError, OSError) as error:  # a user error (settings, files): every process raises it
            outcome = [("error", type(error).__name__, str(error))]
    dist.broadcast_object_list(outcome, src=0)  # also a barrier
    if outcome[0][0] == "error":
        _, name, message = outcome[0]
        raise {"FileExistsError": FileExistsError, "ValueError": ValueError}.get(name, OSError)(message)
    return outcome[0][1]


def _checked_file_arguments(input_path, output_path, chunk_size):
    """`embed_file`'s checks before any work: (output path, output format)."""
    output_path = Path(output_path)
    output_format = OUTPUT_FORMATS.get(output_path.suffix.lower())
    if output_format is None:
        raise ValueError(f"output must end in .hdf5, .h5 or .npz, got {str(output_path)!r}")
    if output_format == "hdf5":
        _import_h5py()
    if output_path.exists():
        raise FileExistsError(f"{output_path} already exists; remove it or choose another output name")
    if not Path(input_path).is_file():
        raise ValueError(f"{input_path} is not a regular file: it is read more than once, which a pipe cannot be")
    _check_positive("chunk_size", chunk_size)
    return output_path, output_format


class _ProgressBar:
    """A progress bar over sentences on stderr that also counts the sentences and tokens it was given, with the
    tokens per second beside it; `update(sentences)` after each batch."""

    def __init__(self, total, description, enabled):
        self.bar = tqdm(total=total, unit="sent", desc=description, file=sys.stderr, disable=not enabled)
        self.start, self.sentences, self.tokens = time.monotonic(), 0, 0

    def update(self, sentences):
        self.sentences += len(sentences)
        self.tokens += sum(len(words) for words in sentences)
        self.bar.update(len(sentences))
        self.bar.set_postfix_str(
            f"{self.tokens / max(time.monotonic() - self.start, 1e-9):,.0f} tokens/s", refresh=False
        )

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.bar.close()


def _sum_over_processes(*counts):
    """The counts summed over the processes of a `torch.distributed` group (a barrier: it waits for every process);
    the counts themselves without one."""
    if _rank_and_world_size()[1] == 1:
        return counts
    total = torch.tensor(counts, dtype=torch.long)
    dist.all_reduce(total)
    return tuple(total.tolist())


def _check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _import_h5py():
    try:
        import h5py
    except ImportError as error:
        raise ImportError("writing .hdf5 needs h5py: pip install 'elmo-hf[embed]' (or write .npz)") from error
    return h5py


def _scan_input(input_path):
    """(line count, sha256 of the bytes) of the input, after checking that no line is empty. Lines end at "\\n"
    only, here and wherever the input is read."""
    digest, line_count, empty = hashlib.sha256(), 0, []
    with open(input_path, "rb") as binary:
        for line_count, line in enumerate(binary, start=1):
            digest.update(line)
            if not line.decode("utf-8").strip() and len(empty) < 5:
                empty.append(line_count)
    if empty:
        raise ValueError(f"{input_path} has empty lines (first ones: {empty}); ELMo needs at least one word per line")
    if line_count == 0:
        raise ValueError(f"{input_path} is empty")
    return line_count, digest.hexdigest()


def _read_chunks(input_path, chunk_size):
    """The input's stripped lines, `chunk_size` at a time."""
    with open(input_path, encoding="utf-8", newline="\n") as text:
        lines = []
        for line in text:
            lines.append(line.strip())
            if len(lines) == chunk_size:
                yield lines
                lines = []
        if lines:
            yield lines


def _model_digest(model):
    """sha256 over the parameter names and values: a resumed run must use the very same weights."""
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode("utf-8"))
        digest.update(tensor.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()


def _open_work_dir(work_dir, settings, resume):
    """Create OUTPUT.partial/ or, with `resume`, reopen it; the set of chunks already saved there."""
    manifest = work_dir / "manifest.json"
    if manifest.exists():
        if not resume:
            raise FileExistsError(
                f"{work_dir} holds an unfinished run: pass resume=True (--resume) to continue it, or delete it to "
                "start over"
            )
        saved = json.loads(manifest.read_text(encoding="utf-8"))
        changed = sorted(key for key in settings.keys() | saved.keys() if settings.get(key) != saved.get(key))
        if changed:
            raise ValueError(
                f"cannot resume {work_dir}: these settings differ from the unfinished run's: "
                + ", ".join(f"{key} (was {saved.get(key)!r}, now {settings.get(key)!r})" for key in changed)
            )
        return {int(path.stem.split("-")[1]) for path in work_dir.glob("chunk-*.npz")}
    # A folder without a manifest was interrupted before its first chunk was saved: nothing in it to keep. The
    # output's own folder is created too, as users of a command expect.
    created = not work_dir.exists()
    work_dir.mkdir(parents=True, exist_ok=True)
    try:
        _write_atomically(manifest, lambda file: file.write(json.dumps(settings, indent=2).encode("utf-8")))
    except BaseException:
        if created:
            shutil.rmtree(work_dir, ignore_errors=True)
        raise
    return set()


def _write_chunk(work_dir, chunk, first_line, arrays):
    """Save one chunk's arrays, keyed by line index, under a name that only exists once they are all on disk."""
    named = {str(first_line + offset): array for offset, array in enumerate(arrays)}
    _write_atomically(work_dir / f"chunk-{chunk:08d}.npz", lambda file: np.savez(file, **named))


def _write_atomically(path, write):
    """Call write(binary file) on a temporary name, sync it to disk, then rename it to `path`; on any error or
    interrupt the temporary file is removed."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        with open(temporary, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


@contextlib.contextmanager
def _output_faults(output_path, work_dir, needed=None):
    """An OSError raised inside while writing (a full disk, a read-only folder, a permission denial) becomes an
    `UnwritableOutputError` for `output_path` (`needed`: about the bytes still to write) that says whether the
    finished chunks in `work_dir` are kept for a resume. An unfinished run met without `resume` is not one."""
    try:
        yield
    except OSError as error:
        if isinstance(error, (UnwritableOutputError, FileExistsError)):
            raise
        kept = None
        if (work_dir / "manifest.json").is_file():
            chunks = len(list(work_dir.glob("chunk-*.npz")))
            kept = (
                f"the {chunks} finished chunks are kept in {work_dir}/: run the same command with --resume "
                "(resume=True) to continue"
            )
        raise UnwritableOutputError(output_path, error, needed, kept) from error


def _assemble(work_dir, output_path, output_format, input_path, chunk_size):
    """Copy the saved chunks, in line order, into the final file, rename it to `output_path` and remove `work_dir`."""
    sentence_to_index, line_count = {}, 0
    for chunk, lines in enumerate(_read_chunks(input_path, chunk_size)):
        for offset, line in enumerate(lines):
            sentence_to_index[line] = str(chunk * chunk_size + offset)  # a repeated line keeps its last index
        line_count += len(lines)
    mapping = json.dumps(sentence_to_index)
    chunks = sorted(work_dir.glob("chunk-*.npz"))
    temporary = work_dir / f"assembled{output_path.suffix}"
    # The chunks' bytes, about 200-450 bytes of headers per dataset, and the mapping (measured on .hdf5 and .npz).
    _reserve(temporary, sum(path.stat().st_size for path in chunks) + 512 * line_count + 2 * len(mapping))
    try:
        _write_assembled(temporary, output_format, chunks, mapping)
        with open(temporary, "rb+") as file:
            os.fsync(file.fileno())
        os.replace(temporary, output_path)
    except BaseException:  # the chunks stay for a resume; the copy would only take room
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    shutil.rmtree(work_dir)


def _reserve(path, size):
    """Allocate `size` bytes at `path`, then remove it: a full disk or an exceeded quota raises its OSError here,
    before the output is written (h5py can crash when a file it writes cannot grow). Skipped where the system has
    no posix_fallocate, or the file system refuses it."""
    if not hasattr(os, "posix_fallocate"):
        return
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(descriptor, 0, size)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
    finally:
        os.close(descriptor)
        os.remove(path)


def _write_assembled(temporary, output_format, chunks, mapping):
    if output_format == "hdf5":
        h5py = _import_h5py()
        with h5py.File(temporary, "w") as output:
            for path in chunks:
                with np.load(path) as arrays:
                    for key in arrays.files:
                        output.create_dataset(key, data=arrays[key])
            output.create_dataset("sentence_to_index", data=[mapping], dtype=h5py.string_dtype())
    else:
        with zipfile.ZipFile(temporary, "w", zipfile.ZIP_STORED, allowZip64=True) as output:
            for path in chunks:
                with np.load(path) as arrays:
                    for key in arrays.files:
                        _write_npy(output, key, arrays[key])
            _write_npy(output, "sentence_to_index", np.array(mapping))


def _write_npy(archive, key, array):
    # A fixed timestamp makes the same vectors give the same bytes, run after run.
    with archive.open(zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0)), "w", force_zip64=True) as file:
        np.lib.format.write_array(file, array, allow_pickle=False)


__all__ = ["ElmoEmbedder", "ElmoTokenCache", "length_batches"]
