"""`elmoformanylangs.Embedder` on elmo-hf: the same call, the same outputs, no torch-0.4-era code.

    from elmo_hf.compat.elmoformanylangs import Embedder   # was: from elmoformanylangs import Embedder

    embedder = Embedder("zh.model")                          # an ELMoForManyLangs folder, or a converted checkpoint
    vectors = embedder.sents2elmo([["今天", "天气", "很", "好"]])  # [(4, 1024)]: the average of the 3 layers

An ELMoForManyLangs folder is converted on first use (`elmo_hf.convert.convert_elmoformanylangs.convert_efml`, verified
against its arithmetic) and the checkpoint cached under `cache_dir`; later uses load the cache.

Like the original, the Embedder is stateful: each batch's LSTMs start from the final states of the batch before
(batch row i continues state row i), sentences are batched by decreasing length, and the order of a call's batches is
shuffled with Python's global `random`. A fresh Embedder's first call whose sentences fit in one batch starts from
zeros and is therefore deterministic; `reset_states()` returns to that. With the same seed of `random`, later calls
and multi-batch calls reproduce the original's outputs too.
"""

import hashlib
import os
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..convert.convert_elmoformanylangs import convert_efml, is_efml_folder
from ..model.modeling_elmo import ElmoModel
from ..model.tokenization_elmo import ElmoTokenizer
from ..user_errors import UserInputError

DEFAULT_CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "elmo_hf", "elmoformanylangs")


def converted_checkpoint(model_dir: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> str:
    """The elmo-hf checkpoint for `model_dir`: itself when already converted, else its cached conversion (made now
    when missing; the cache key covers the folder's path and the sizes and times of its .json, .dic and .pkl
    files)."""
    model_dir = os.path.abspath(str(model_dir))
    if not is_efml_folder(model_dir):
        if not os.path.isfile(os.path.join(model_dir, "model.safetensors")):
            raise UserInputError(
                f"{model_dir}: neither an ELMoForManyLangs model folder (encoder.pkl, token_embedder.pkl, ...) nor a "
                "converted checkpoint (model.safetensors)"
            )
        return model_dir
    key = hashlib.sha256(model_dir.encode("utf-8"))
    for name in sorted(os.listdir(model_dir)):  # the model's own files: its JSON configs, lexicons and weights
        path = os.path.join(model_dir, name)
        if name.endswith((".json", ".dic", ".pkl")) and os.path.isfile(path):
            stat = os.stat(path)
            key.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns};".encode())
    output_dir = os.path.join(cache_dir or DEFAULT_CACHE_DIR, f"{os.path.basename(model_dir)}-{key.hexdigest()[:16]}")
    if not os.path.isfile(os.path.join(output_dir, "model.safetensors")):
        partial = f"{output_dir}.partial-{os.getpid()}"
        convert_efml(model_dir, partial)
        os.replace(partial, output_dir)
    return output_dir


class Embedder:
    r"""
    ELMoForManyLangs' `Embedder`, computed by elmo-hf.

    Args:
        model_dir (str): an ELMoForManyLangs model folder (converted on first use) or a converted checkpoint.
        batch_size (int, defaults to 64): sentences per batch, as the original.
        cache_dir (str, optional): where conversions are kept (default: ~/.cache/elmo_hf/elmoformanylangs).
        device (str or torch.device, defaults to "cpu"): where the model runs.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        batch_size: int = 64,
        cache_dir: str | os.PathLike[str] | None = None,
        device: str | torch.device = "cpu",
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.model_dir = model_dir
        self.batch_size = batch_size
        path = converted_checkpoint(model_dir, cache_dir)
        # transformers' PreTrainedModel.to is a functools.wraps, which typeshed types as binding no `self`.
        self.model = ElmoModel.from_pretrained(path).to(device).eval()  # type: ignore[arg-type]
        self.tokenizer = ElmoTokenizer.from_pretrained(path)
        if self.tokenizer.char_lexicon is None:
            raise UserInputError(
                f"{path}: not converted from ELMoForManyLangs (its tokenizer has no char_lexicon.json)"
            )
        self._states: tuple[torch.Tensor, ...] | None = None  # ElmoModelOutput.lstm_states

    def reset_states(self) -> None:
        """Forget the LSTM states carried from earlier batches: the next batch starts from zeros."""
        self._states = None

    @torch.no_grad()
    def sents2elmo(self, sents: Sequence[Sequence[str]], output_layer: int = -1) -> list[np.ndarray]:
        """
        Args:
            sents (list of list of str): the sentences, each a list of words.
            output_layer (int, defaults to -1): -1, the average of all layers; 0 (the token layer), 1, 2, ...: that
                layer; -2: all layers.

        Returns:
            one float32 array per sentence, in input order: `(words, 2 * projection_dim)`, or
            `(num_lstm_layers + 1, words, 2 * projection_dim)` for -2.
        """
        layers = self.model.config.num_lstm_layers + 1
        if output_layer not in (-1, -2, *range(layers)):
            raise ValueError(f"output_layer must be -1, -2 or 0..{layers - 1}, got {output_layer!r}")
        # As the original: sentences by decreasing length, cut into batches, the batches in a shuffled order.
        order = sorted(range(len(sents)), key=lambda index: -len(sents[index]))
        batches = [order[start : start + self.batch_size] for start in range(0, len(order), self.batch_size)]
        permutation = list(range(len(batches)))
        random.shuffle(permutation)
        results: list[Any] = [None] * len(sents)  # each filled with its sentence's array below
        device = next(self.model.parameters()).device
        for batch_rows in (batches[index] for index in permutation):
            batch = self.tokenizer(
                [list(sents[index]) for index in batch_rows],
                is_split_into_words=True,
                padding=True,
                return_tensors="pt",
            ).to(device)
            output = self.model(**batch, output_hidden_states=True, lstm_states=self._states)
            self._states = output.lstm_states
            stacked = torch.stack(output.hidden_states).float().cpu().numpy()  # (layers, batch, words, 2 * proj)
            for row, index in enumerate(batch_rows):
                data = stacked[:, row, 1 : len(sents[index]) + 1]  # without <bos> and <eos>
                if output_layer == -1:
                    results[index] = np.average(data, axis=0)
                elif output_layer == -2:
                    results[index] = data
                else:
                    results[index] = data[output_layer]
        return results


__all__ = ["Embedder", "converted_checkpoint"]
