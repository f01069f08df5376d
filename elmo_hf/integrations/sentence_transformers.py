"""ELMo as a sentence-transformers input module: sentence-transformers' own `encode` (batching, progress bar,
normalization, similarity) runs on ELMo's word vectors.

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from elmo_hf.integrations.sentence_transformers import ElmoSentenceTransformerModule

    elmo = ElmoSentenceTransformerModule("./elmo-original")
    model = SentenceTransformer(modules=[elmo, Pooling(elmo.get_embedding_dimension(), "mean")])
    vectors = model.encode(["The cat sat .", "A dog barked ."], batch_size=64, show_progress_bar=True)

The module is built from this package at run time, so no `trust_remote_code` is involved. With mean pooling the
vectors equal `ElmoEmbedder.embed_sentences(words, layers="average", sentence_vectors=True)`: the mean over each
sentence's words (the `<S>`/`</S>` positions left out) of the average of the layers. The words are those of
`ElmoTokenizer.tokenize(sentence)` (words and punctuation split apart, for raw text), or `sentence.split()` with
`whitespace_split=True` (for text tokenized already, as allennlp's `elmo` command read it).

- Any elmo-hf checkpoint works, models converted from ELMoForManyLangs included: the module takes the tokenizer
  saved with the checkpoint when the model reads a character lexicon.
- A sentence with no words (`""`, only spaces) gets one word whose vector is zeros, `(2 * projection_dim,)`, so that
  every pooling mode gives it the zero vector instead of stopping the batch (allennlp's `ElmoEmbedder` gave such a
  sentence no word vectors at all: an array `(layers, 0, dim)`).
- `model.max_seq_length = N` keeps the first N words of each sentence (the `<S>`/`</S>` boundaries not counted);
  None, the default, keeps them all (ELMo has no length limit).
- An input that is not a string is a TypeError naming its index in the list given to `encode` (encode sorts its
  inputs by length; the index is the caller's, not the sorted one).

`model.save(folder)` writes the biLM, its tokenizer and this module's settings at the top of the folder (where
sentence-transformers keeps its input module). sentence-transformers 6 imports a module class from outside its own
package only with `trust_remote_code=True`, even an installed one like this: reload with
`SentenceTransformer(folder, trust_remote_code=True)`, or without the flag by rebuilding the pipeline from
`ElmoSentenceTransformerModule.load(folder)` and `Pooling.load(folder, subfolder="1_Pooling")`. Loading reads only
the folder: it works offline (`HF_HUB_OFFLINE=1`) from a copy anywhere.
"""

import os
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

import torch

try:
    from sentence_transformers.base.modules import InputModule
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "elmo_hf.integrations.sentence_transformers needs sentence-transformers>=6: "
        'pip install "elmo-hf[sentence-transformers]"'
    ) from error

from ..inference.embedder import ElmoEmbedder
from ..model.modeling_elmo import ElmoModel
from ..model.tokenization_elmo import ElmoTokenizer
from .common import check_positive_int, check_single_vector_layers, checkpoint_tokenizer, load_checkpoint, shown


class ElmoSentenceTransformerModule(InputModule):
    r"""
    Turns raw sentences into ELMo word vectors for the modules that follow (usually `Pooling`).

    Args:
        model (str or `ElmoModel`, optional): a checkpoint folder, a Hub name or a loaded `ElmoModel`; defaults to
            the small English model shipped in the package (`elmo_hf.DEFAULT_MODEL`).
        layers (str, defaults to "average"): how the layers become one vector per word: "average" (their mean),
            "top" (the last LSTM layer) or "mix" (their sum weighted by `mix_weights`), as in `ElmoEmbedder`.
        mix_weights (list of floats, one per layer): the weights for `layers="mix"`, token layer first.
        whitespace_split (bool, defaults to False): split sentences on whitespace only, instead of into words and
            punctuation (`ElmoTokenizer.tokenize`).
        max_seq_length (int, optional): keep the first `max_seq_length` words of each sentence; None keeps all.
        tokenizer (`ElmoTokenizer`, optional): for a loaded `model`; defaults to the one its checkpoint needs.

    `preprocess` splits each sentence into words; `forward` returns
    `token_embeddings` (batch, words, 2 * projection_dim) and `attention_mask` (batch, words), 1 on words and 0 on
    padding, without the sentence boundaries (a sentence with no words: one zero vector, mask 1).
    """

    config_file_name = "elmo_sentence_transformer.json"
    config_keys = ["layers", "mix_weights", "whitespace_split", "max_seq_length"]
    model: ElmoModel
    tokenizer: ElmoTokenizer

    def __init__(
        self,
        model: str | os.PathLike[str] | ElmoModel | None = None,
        layers: str = "average",
        mix_weights: Sequence[float] | None = None,
        whitespace_split: bool = False,
        max_seq_length: int | None = None,
        tokenizer: ElmoTokenizer | None = None,
    ) -> None:
        super().__init__()
        check_single_vector_layers(layers, mix_weights)
        if not isinstance(whitespace_split, bool):
            raise ValueError(f"whitespace_split must be True or False, got {shown(whitespace_split)}")
        if isinstance(model, ElmoModel):
            tokenizer = checkpoint_tokenizer(model, tokenizer)
        elif tokenizer is not None:
            raise ValueError("tokenizer= goes with a loaded ElmoModel; a checkpoint brings its own")
        else:
            model, tokenizer = load_checkpoint(model)
        # The embedder checks the number of mix_weights and turns `layers` into one weight per layer.
        weights = ElmoEmbedder(model, tokenizer=tokenizer)._layer_weights(layers, mix_weights)
        self.layers, self.mix_weights, self.whitespace_split = layers, mix_weights, whitespace_split
        self.max_seq_length = max_seq_length
        self.model, self.tokenizer = model, tokenizer
        self.register_buffer("layer_weights", weights, persistent=False)  # (layers,)

    @property
    def max_seq_length(self) -> int | None:
        """The most words kept per sentence (boundaries not counted), or None for all of them."""
        return self._max_seq_length

    @max_seq_length.setter
    def max_seq_length(self, value: int | None) -> None:
        check_positive_int("max_seq_length", value, allow_none=True)
        self._max_seq_length = value

    def get_embedding_dimension(self) -> int:
        return 2 * self.model.config.projection_dim

    def preprocess(  # type: ignore[override]  # strings only: any other input is a TypeError naming it
        self, inputs: list[str], prompt: str | None = None, **kwargs: Any
    ) -> dict[str, torch.Tensor]:
        """Sentences (strings) -> `input_ids` (batch, longest + 2, row width), `attention_mask` (batch, longest + 2)
        and `word_counts` (batch,), the words kept per sentence (0 for a sentence without words)."""
        batch = inputs  # the list encode handed over, by which _caller_indices finds the caller's indices
        for position, text in enumerate(batch):
            if not isinstance(text, str):
                index = _caller_indices(batch)[position]
                raise TypeError(f"input {index} must be a string, got {type(text).__name__}: {shown(text)}")
        if prompt:
            inputs = self._prepend_prompt(inputs, prompt)
        split = str.split if self.whitespace_split else self.tokenizer.tokenize
        sentences = [split(text)[: self.max_seq_length] for text in inputs]
        limit = self.tokenizer.max_words
        for position, words in enumerate(sentences):
            if limit is not None and len(words) > limit:
                index = _caller_indices(batch)[position]
                raise ValueError(
                    f"input {index} has {len(words)} words, more than the tokenizer's max_words={limit}: "
                    f"set max_seq_length (at most {limit})"
                )
        word_counts = torch.tensor([len(words) for words in sentences])  # (batch,)
        # A sentence without words is encoded as one stand-in word, whose vector `forward` replaces by zeros.
        sentences = [words or [self.tokenizer.pad_token] for words in sentences]
        features = dict(self.tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt"))
        features["word_counts"] = word_counts
        return features

    def forward(self, features: dict[str, torch.Tensor], **kwargs: Any) -> dict[str, torch.Tensor]:
        attention_mask = features["attention_mask"]  # (batch, words + 2), the boundaries included
        output = self.model(input_ids=features["input_ids"], attention_mask=attention_mask, output_hidden_states=True)
        hidden = torch.stack(output.hidden_states, dim=1)[:, :, 1:-1]  # (batch, layers, longest, dim): <S> dropped
        mixed = torch.einsum("l,blwd->bwd", self.layer_weights.to(hidden.dtype), hidden)  # (batch, longest, dim)
        lengths = features["word_counts"].to(mixed.device)  # (batch,)
        positions = torch.arange(mixed.shape[1], device=mixed.device)  # (longest,)
        words = positions < lengths.unsqueeze(1)  # (batch, longest)
        # A shorter sentence's </S> and padding fall inside `longest`: zeroed and masked out. A sentence without
        # words keeps its first position, zeroed, so that any pooling gives it the zero vector.
        features["token_embeddings"] = mixed.masked_fill(~words.unsqueeze(-1), 0.0)
        features["attention_mask"] = (words | ((lengths == 0).unsqueeze(1) & (positions == 0))).long()
        return features

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        self.model.save_pretrained(output_path)  # always safetensors, whatever `safe_serialization` says
        self.tokenizer.save_pretrained(output_path)
        self.save_config(output_path)

    @classmethod
    def load(  # type: ignore[override]  # init_defaults, if given, is in kwargs: the folder's settings are used
        cls,
        model_name_or_path: str,
        subfolder: str = "",
        token: bool | str | None = None,
        cache_folder: str | None = None,
        revision: str | None = None,
        local_files_only: bool = False,
        **kwargs: Any,
    ) -> "ElmoSentenceTransformerModule":
        hub = {"token": token, "cache_dir": cache_folder, "revision": revision, "local_files_only": local_files_only}
        config = cls.load_config(
            model_name_or_path,
            subfolder=subfolder,
            token=token,
            cache_folder=cache_folder,
            revision=revision,
            local_files_only=local_files_only,
        )
        model, tokenizer = load_checkpoint(model_name_or_path, subfolder=subfolder, **hub)
        return cls(model, tokenizer=tokenizer, **config)


def _caller_indices(batch: Sequence[object]) -> list[int]:
    """The index in the caller's own list of each item of `batch`. SentenceTransformer.encode sorts its inputs by
    length and hands this module slices of the sorted list (`inputs_batch`), so a position in `batch` would name
    another sentence; encode's frame holds the sorted order (`length_sorted_idx`) and where the slice starts
    (`start_index`). Found only for the very list it handed over, else (preprocess called directly) the positions in
    `batch` are the caller's. With a multi-process pool, indices count within each chunk. Only errors call this."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        names = frame.f_locals
        if names.get("inputs_batch") is batch and "length_sorted_idx" in names and "start_index" in names:
            order, start = names["length_sorted_idx"], names["start_index"]
            return [int(order[start + position]) for position in range(len(batch))]
        frame = frame.f_back
    return list(range(len(batch)))
