"""ELMo's character-level tokenizer: words in, bilm-tf's exact character ids out."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from tokenizers import AddedToken, Regex, pre_tokenizers
from transformers.tokenization_utils_base import (
    BatchEncoding,
    EncodedInput,
    PreTokenizedInput,
    PreTrainedTokenizerBase,
    TextInput,
    TruncationStrategy,
)
from transformers.utils import PaddingStrategy, TensorType, to_py_obj

if TYPE_CHECKING:
    import torch

from .char_ids import CHARACTER_ID_NAMES, NUM_CHARACTER_IDS, char_ids_to_word, word_to_char_ids

# Raw text is split on whitespace, then punctuation is split off the words ("end." -> "end", ".")
# while word-internal punctuation stays ("U.S", "don't", "state-of-the-art").
_WORD_PATTERN = r"\w+(?:[-'’.]\w+)*|[^\w\s]"
# Lone surrogates have no UTF-8 encoding: they are dropped from raw text before splitting, as bilm-tf drops
# them from each word's bytes.
_SURROGATES = re.compile("[\ud800-\udfff]")


class ElmoBatchEncoding(BatchEncoding):
    """A `BatchEncoding` that remembers which word each position came from (`word_ids()`)."""

    def __init__(
        self,
        data: dict[str, Any] | None = None,
        word_ids: Sequence[Sequence[int | None]] | None = None,
        tensor_type: str | TensorType | None = None,
        prepend_batch_axis: bool = False,
    ) -> None:
        if data is not None and tensor_type == TensorType.PYTORCH and isinstance(data.get("input_ids"), list):
            # Nested lists of character ids reach torch through one NumPy array: torch.tensor on the lists walks
            # every id in Python, which would be most of the tokenizer's time (benchmarks/benchmark_tokenizer.py).
            data = {**data, "input_ids": _as_int64_array(data["input_ids"])}
        super().__init__(data, tensor_type=tensor_type, prepend_batch_axis=prepend_batch_axis)
        self._word_ids = word_ids

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """Index of the input word at each position, None at sentence boundaries and padding."""
        if self._word_ids is None:
            raise ValueError("word_ids() is only available on the output of ElmoTokenizer.__call__")
        return list(self._word_ids[batch_index])


class ElmoTokenizer(PreTrainedTokenizerBase):
    r"""
    Turns sentences into ELMo's character ids, exactly as bilm-tf's `Batcher` does (the scheme itself is in
    `elmo_hf.model.char_ids`). There is no word vocabulary: any word is encoded from its UTF-8 bytes.

    `vocab_size` and `get_vocab()` describe the character ids that fill `input_ids` (0..261), the only finite
    vocabulary ELMo's input has; a "token" for `tokenize`/`convert_tokens_to_ids` is a whole word, whose "id" is a
    row of such character ids. The language model's word vocabulary (`vocab.txt`, the targets of
    [`ElmoForPreTraining`]) is [`ElmoWordVocabulary`], not part of the tokenizer.

    Args:
        max_characters_per_token (int, defaults to 50): character ids per word, markers included. Longer
            words are truncated to `max_characters_per_token - 2` UTF-8 bytes.
        bos_token (str, defaults to "<S>"), eos_token (str, defaults to "</S>"): the sentence boundaries
            added by `add_special_tokens=True`; a word equal to one of them gets the boundary's ids.
        pad_token (str, defaults to "<pad>"): the name of a padding word, whose character ids are all 0.
        max_words (int or None, defaults to None): the most words a sentence may have (boundaries excluded,
            after any truncation); a longer sentence raises a ValueError before anything is encoded. None: no limit.
        char_lexicon_file (str, optional): a character lexicon, `char_lexicon.json` (`{character: id}`, ids 1..N),
            for models converted from ELMoForManyLangs: a word's characters are then Unicode code points looked up
            there, not UTF-8 bytes, and a longer word is cut to `max_characters_per_token - 2` code points. Its
            `char_markers` name the entries used for the begin and end of a word, padding and unknown characters;
            the sentence boundaries are looked up as whole entries (`bos_token`, `eos_token`).
        word_lexicon_file (str, optional): with a character lexicon, a word lexicon, `word_lexicon.json` (`{word:
            id}`, ids 1..N): each row of `input_ids` then ends with the word's id (the cut word, looked up exactly;
            the `unknown` entry of `word_markers` when absent), for models with a word embedding.
        char_markers (dict, optional): with a character lexicon, the entries `begin_of_word`, `end_of_word`,
            `padding` and `unknown`.
        word_markers (dict, optional): with a word lexicon, the entry `unknown` (for words it lacks).

    Returns from `__call__` (per sentence, W = words, boundaries included):
        input_ids: (W, max_characters_per_token) ints, 0 = padding word (one more column, the word id, with a word
            lexicon).
        attention_mask: (W,), 1 for real words and boundaries, 0 for padding.
    """

    model_input_names = ["input_ids", "attention_mask"]
    vocab_files_names = {"char_lexicon_file": "char_lexicon.json", "word_lexicon_file": "word_lexicon.json"}
    # Padding value of every per-word field `pad` knows; `input_ids` pads with a word of zeros. `labels` are padded
    # only when they hold one entry per word (token tags, language-model targets); a sentence's label passes through.
    word_level_padding_values = {
        "attention_mask": 0,
        "special_tokens_mask": 1,
        "token_type_ids": 0,
        "offset_mapping": (0, 0),
        "labels": -100,
    }

    def __init__(
        self,
        max_characters_per_token: int = 50,
        bos_token: str = "<S>",
        eos_token: str = "</S>",
        pad_token: str = "<pad>",
        max_words: int | None = None,
        char_lexicon_file: str | os.PathLike[str] | None = None,
        word_lexicon_file: str | os.PathLike[str] | None = None,
        char_markers: Mapping[str, str] | None = None,
        word_markers: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        if "vocab_file" in kwargs:
            raise ValueError(
                "ElmoTokenizer has no word vocabulary (vocab_file): load the language model's vocab.txt with "
                "elmo_hf.ElmoWordVocabulary.from_file or .from_pretrained"
            )
        if max_words is not None and (isinstance(max_words, bool) or not isinstance(max_words, int) or max_words < 1):
            raise ValueError(f"max_words must be a positive int or None, got {max_words!r}")
        self.max_words = max_words
        if isinstance(max_characters_per_token, bool) or not isinstance(max_characters_per_token, int):
            raise ValueError(f"max_characters_per_token must be an int, got {max_characters_per_token!r}")
        if max_characters_per_token < 3:
            raise ValueError(f"max_characters_per_token must be at least 3, got {max_characters_per_token!r}")
        self.max_characters_per_token = max_characters_per_token
        self._pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(_WORD_PATTERN), behavior="isolated")]
        )
        self.char_lexicon: dict[str, int] | None = None
        self.word_lexicon: dict[str, int] | None = None
        if char_lexicon_file is not None:
            self._load_lexicons(char_lexicon_file, word_lexicon_file, char_markers, word_markers, bos_token, eos_token)
            # Only lexicon tokenizers carry these settings, so bilm-tf tokenizers save the same files as before.
            assert char_markers is not None  # _load_lexicons checked it
            kwargs.update(char_markers=dict(char_markers), word_markers=word_markers)
        elif word_lexicon_file is not None:
            raise ValueError("word_lexicon_file needs a char_lexicon_file")
        super().__init__(
            max_characters_per_token=max_characters_per_token,
            max_words=max_words,
            bos_token=bos_token,
            eos_token=eos_token,
            pad_token=pad_token,
            **kwargs,
        )

    def _load_lexicons(
        self,
        char_lexicon_file: str | os.PathLike[str],
        word_lexicon_file: str | os.PathLike[str] | None,
        char_markers: object,
        word_markers: object,
        bos: str,
        eos: str,
    ) -> None:
        """Reads and checks the lexicons; ValueErrors name the file and the entry."""
        self.char_lexicon = _read_lexicon(char_lexicon_file)
        needed = ("begin_of_word", "end_of_word", "padding", "unknown")
        if not isinstance(char_markers, Mapping) or sorted(char_markers) != sorted(needed):
            raise ValueError(f"char_markers must name the lexicon entries {needed}, got {char_markers!r}")
        for token in (*char_markers.values(), bos, eos):
            if token not in self.char_lexicon:
                raise ValueError(f"{char_lexicon_file}: has no entry {token!r}, expected one for each marker")
        self._char_marker_ids = {role: self.char_lexicon[token] for role, token in char_markers.items()}  # role -> id
        if word_lexicon_file is not None:
            self.word_lexicon = _read_lexicon(word_lexicon_file)
            unknown = word_markers.get("unknown") if isinstance(word_markers, Mapping) else None
            if unknown not in self.word_lexicon:
                raise ValueError(f"{word_lexicon_file}: has no entry {unknown!r}, expected word_markers['unknown']")
            self.word_unknown_id = self.word_lexicon[unknown]
        self._lexicon_char_names = {char_id: token for token, char_id in self.char_lexicon.items()}
        self._lexicon_files = {"char_lexicon_file": self.char_lexicon, "word_lexicon_file": self.word_lexicon}
        self._lexicon_rows: dict[str, tuple[int, ...]] = {}

    @property
    def row_width(self) -> int:
        """Ids per word in `input_ids`: `max_characters_per_token`, plus the word id with a word lexicon."""
        return self.max_characters_per_token + (self.word_lexicon is not None)

    @property
    def is_fast(self) -> bool:
        """ElmoTokenizer is pure Python (transformers' "slow" tokenizer kind); pipelines check this."""
        return False

    @property
    def pad_token_id(self) -> int:
        """A padding word is a row of zeros: its character id is 0."""
        return 0

    @property
    def bos_token_id(self) -> None:
        """None: `<S>` is a row of character ids, not one id (transformers' Trainer would otherwise copy that row into
        the model config as a token id)."""
        return None

    @property
    def eos_token_id(self) -> None:
        """None, as `bos_token_id`: `</S>` is a row of character ids."""
        return None

    # ---- vocabulary: the character ids; a "token" is a word, its "id" a row of character ids ----
    @property
    def vocab_size(self) -> int:
        """Number of distinct character ids in `input_ids` (0 = no character, the 256 bytes, 5 markers; or 0 and the
        character lexicon's ids)."""
        return NUM_CHARACTER_IDS if self.char_lexicon is None else len(self.char_lexicon) + 1

    def __len__(self) -> int:
        return self.vocab_size

    def get_vocab(self) -> dict[str, int]:
        """The character ids by name (`<0x41>` for the byte of "A", `<bow_char>` for the begin-of-word marker; the
        character lexicon's entries)."""
        if self.char_lexicon is not None:
            return {"<no_char>": 0, **self.char_lexicon}
        return {name: char_id for char_id, name in enumerate(CHARACTER_ID_NAMES)}

    @property
    def added_tokens_decoder(self) -> dict[int, AddedToken]:
        return {}

    @property
    def added_tokens_encoder(self) -> dict[str, int]:
        return {}

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        """The lexicons, if any (`char_lexicon.json`, `word_lexicon.json`); bilm-tf's character ids are fixed, and
        the settings go to `tokenizer_config.json`."""
        if self.char_lexicon is None:
            return ()
        written = []
        for key, lexicon in self._lexicon_files.items():
            if lexicon is not None:
                name = (filename_prefix + "-" if filename_prefix else "") + self.vocab_files_names[key]
                path = f"{save_directory}/{name}"
                with open(path, "w", encoding="utf-8") as file:
                    json.dump(lexicon, file, ensure_ascii=False, indent=0)
                written.append(path)
        return tuple(written)

    def tokenize(self, text: str, **kwargs: Any) -> list[str]:  # type: ignore[override]  # no pair: one sentence
        """Split raw text into words, as `__call__` does for strings."""
        return self._pre_tokenize(text)[0]

    # A word's id is a row of character ids (the base class returns one int per token).
    def convert_tokens_to_ids(self, tokens: str | Iterable[str]) -> list[int] | list[list[int]]:  # type: ignore[override]
        """Character ids of one word (a list of ints) or of a list of words (a list of lists)."""
        if isinstance(tokens, str):
            return list(self._word_to_char_ids(tokens))
        return [list(self._word_to_char_ids(token)) for token in tokens]

    def convert_ids_to_tokens(  # type: ignore[override]  # a word's id is a row of character ids
        self,
        ids: Sequence[int] | Sequence[Sequence[int]] | np.ndarray | torch.Tensor,
        skip_special_tokens: bool = False,
    ) -> str | list[str]:
        """The word(s) behind one row of character ids, or behind a list of rows."""
        rows = to_py_obj(ids)  # nested lists
        if rows and isinstance(rows[0], int):
            return self._char_ids_to_word(rows)
        words = [self._char_ids_to_word(row) for row in rows if any(row)]
        if skip_special_tokens:
            words = [word for word in words if word not in (self.bos_token, self.eos_token)]
        return words

    def convert_tokens_to_string(self, tokens: Iterable[str]) -> str:
        return " ".join(tokens)

    def decode(  # type: ignore[override]  # a word's id is a row of character ids
        self,
        token_ids: Sequence[int]
        | Sequence[Sequence[int]]
        | Sequence[Sequence[Sequence[int]]]
        | np.ndarray
        | torch.Tensor,
        skip_special_tokens: bool = False,
        **kwargs: Any,
    ) -> str | list[str]:
        """The text behind character ids: one word's row `(chars,)` -> the word, a sentence's rows `(words, chars)` ->
        its words joined by spaces, a batch `(batch, words, chars)` -> one such string per sentence (transformers'
        `decode` reads ids one level less deep: a sentence's rows would be a batch of words)."""
        rows = to_py_obj(token_ids)
        if isinstance(rows, list) and any(isinstance(row, list) and row and isinstance(row[0], list) for row in rows):
            return [self._decode(sentence, skip_special_tokens) for sentence in rows]
        return self._decode(rows, skip_special_tokens)

    def _decode(  # type: ignore[override]  # a word's id is a row of character ids
        self, token_ids: Sequence[int] | Sequence[Sequence[int]], skip_special_tokens: bool = False, **kwargs: Any
    ) -> str:
        tokens = self.convert_ids_to_tokens(token_ids, skip_special_tokens)
        if isinstance(tokens, str):  # one word's row: the word itself, not its characters
            special = skip_special_tokens and tokens in (self.bos_token, self.eos_token)
            tokens = [] if special else [tokens]
        return self.convert_tokens_to_string(tokens)

    def _word_to_char_ids(self, word: str) -> tuple[int, ...]:
        if self.char_lexicon is None:
            return word_to_char_ids(word, self.max_characters_per_token, self.bos_token, self.eos_token)
        row = self._lexicon_rows.get(word)
        if row is None:
            row = self._lexicon_rows[word] = self._lexicon_word_to_ids(word)
        return row

    def _lexicon_word_to_ids(self, word: str) -> tuple[int, ...]:
        """ELMoForManyLangs' row for `word`: its code points cut to `max_characters_per_token - 2`, each looked up in
        the character lexicon (unknown ones as the unknown marker), between the word markers, padded with the
        padding marker; a sentence boundary is its own lexicon entry. With a word lexicon, the (cut) word's id."""
        assert self.char_lexicon is not None  # a lexicon tokenizer's method
        limit, markers = self.max_characters_per_token, self._char_marker_ids
        word = word[: limit - 2]
        if word in (self.bos_token, self.eos_token):
            body = [self.char_lexicon[word]]
        else:
            body = [self.char_lexicon.get(char, markers["unknown"]) for char in word]
        row = [markers["begin_of_word"], *body, markers["end_of_word"]]
        row += [markers["padding"]] * (limit - len(row))
        if self.word_lexicon is not None:
            row.append(self.word_lexicon.get(word, self.word_unknown_id))
        return tuple(row)

    def _char_ids_to_word(self, row: Sequence[int]) -> str:
        if self.char_lexicon is None:
            return char_ids_to_word(row, self.bos_token, self.eos_token)
        row = row[: self.max_characters_per_token]
        markers = {self._char_marker_ids[role] for role in ("begin_of_word", "end_of_word", "padding")}
        return "".join(self._lexicon_char_names.get(char_id, "") for char_id in row if char_id not in markers)

    # ---- encoding ----
    def __call__(
        self,
        text: TextInput | PreTokenizedInput | list[TextInput] | list[PreTokenizedInput] | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> BatchEncoding:
        if text is None and kwargs.get("text_target") is None:
            raise TypeError("text must be a string, a list of strings or a list of word lists, got None")
        return super().__call__(text, *args, **kwargs)

    def _encode_plus(  # type: ignore[override]  # split_special_tokens, if given, is in kwargs (no special words)
        self,
        text: TextInput | PreTokenizedInput | list[TextInput] | list[PreTokenizedInput],
        text_pair: None = None,
        add_special_tokens: bool = True,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: TruncationStrategy | None = None,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | TensorType | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        **kwargs: Any,
    ) -> BatchEncoding:
        if text_pair is not None:
            raise ValueError("ElmoTokenizer encodes single sentences; text_pair is not supported")
        if return_overflowing_tokens:
            raise ValueError("ElmoTokenizer does not support return_overflowing_tokens")
        truncate = truncation_strategy is not None and truncation_strategy.value != "do_not_truncate"
        keep = None
        if truncate and max_length is not None:
            keep = max_length - (2 if add_special_tokens else 0)
            if keep < 1:
                raise ValueError(f"max_length={max_length} leaves no room for a word")
        # Sentences over max_words are rejected, unless truncation cuts every sentence to max_words or fewer.
        limit = None if self.max_words is None or (keep is not None and keep <= self.max_words) else self.max_words
        sentences, is_batched = self._split_batch(text, is_split_into_words, limit)

        encoded: dict[str, Any] = {
            "input_ids": [],
            "attention_mask": [],
            "offset_mapping": [],
            "special_tokens_mask": [],
        }
        all_word_ids = []
        char_ids: Callable[[str], tuple[int, ...] | np.ndarray] = self._word_to_char_ids
        if self.char_lexicon is None:
            # Each word's row as a cached int64 array, which NumPy stacks much faster than nested lists; the
            # settings read once per call, as the special tokens are attributes that transformers' __getattr__
            # resolves, slowly when read per word. benchmarks/benchmark_tokenizer.py measures the tokenizer.
            settings = (self.max_characters_per_token, self.bos_token, self.eos_token)
            char_ids = functools.partial(_char_id_array, settings=settings)
        for words, offsets in sentences:
            word_ids: list[int | None] = list(range(len(words)))
            special = [0] * len(words)
            if keep is not None and len(words) > keep:
                start = 0 if self.truncation_side == "right" else len(words) - keep
                end = start + keep
                words, offsets, word_ids = words[start:end], offsets[start:end], word_ids[start:end]
            if add_special_tokens:
                words = [self.bos_token, *words, self.eos_token]
                offsets = [(0, 0), *offsets, (0, 0)]
                word_ids = [None, *word_ids, None]
                special = [1, *special, 1]
            encoded["input_ids"].append([char_ids(word) for word in words])  # tuples or arrays (bilm-tf's ids)
            encoded["attention_mask"].append([1] * len(words))
            encoded["offset_mapping"].append(offsets)
            encoded["special_tokens_mask"].append(special)
            all_word_ids.append(word_ids)

        if return_attention_mask is False:
            del encoded["attention_mask"]
        if not return_offsets_mapping:
            del encoded["offset_mapping"]
        if not return_special_tokens_mask:
            del encoded["special_tokens_mask"]
        if return_token_type_ids:
            encoded["token_type_ids"] = [[0] * len(mask) for mask in encoded["input_ids"]]

        # The word indices are padded with the other fields (with None), then kept aside for word_ids().
        encoded["word_ids"] = all_word_ids
        self._pad_batch(encoded, padding_strategy, max_length, pad_to_multiple_of, padding_side)
        all_word_ids = encoded.pop("word_ids")
        if return_tensors is None:  # Python lists, as any tokenizer returns them
            encoded["input_ids"] = [
                [row.tolist() if isinstance(row, np.ndarray) else list(row) for row in sentence]
                for sentence in encoded["input_ids"]
            ]
        if return_length:
            encoded["length"] = [len(ids) for ids in encoded["input_ids"]]

        if not is_batched:
            encoded = {key: value[0] for key, value in encoded.items()}
        return ElmoBatchEncoding(
            encoded, word_ids=all_word_ids, tensor_type=return_tensors, prepend_batch_axis=not is_batched
        )

    def _split_batch(
        self, text: object, is_split_into_words: bool, max_words: int | None = None
    ) -> tuple[list[tuple[list[str], list[tuple[int, int]]]], bool]:
        """[(words, offsets)] for each sentence, and whether the input was a batch. A sentence of more than
        `max_words` words is rejected here, before its offsets or ids are built."""
        if is_split_into_words:
            if not isinstance(text, (list, tuple)):
                raise TypeError(
                    f"with is_split_into_words=True the input must be a list of words or a list of such lists, "
                    f"got {type(text).__name__}"
                )
            is_batched = len(text) > 0 and all(isinstance(item, (list, tuple)) for item in text)
            sentences = text if is_batched else [text]
        else:
            if isinstance(text, str):
                is_batched, sentences = False, [text]
            elif isinstance(text, (list, tuple)):
                is_batched, sentences = True, text
            else:
                raise TypeError(f"text must be a string or a list of strings, got {type(text).__name__}")
        if len(sentences) == 0:
            raise ValueError("the batch is empty: give at least one sentence")
        split = []
        for index, sentence in enumerate(sentences):
            if is_split_into_words:
                if not isinstance(sentence, (list, tuple)):
                    raise TypeError(f"sentence {index} must be a list of words, got {type(sentence).__name__}")
                for position, word in enumerate(sentence):
                    if not isinstance(word, str):
                        raise TypeError(
                            f"sentence {index}, word {position} must be a string, got {type(word).__name__}: {word!r}"
                        )
                    if not word.strip():
                        raise ValueError(f"sentence {index}, word {position} is empty or only whitespace: {word!r}")
                _check_word_count(index, len(sentence), max_words)
                words = list(sentence)
                offsets = [(0, len(word)) for word in words]
            else:
                if not isinstance(sentence, str):
                    raise TypeError(f"sentence {index} must be a string, got {type(sentence).__name__}: {sentence!r}")
                words, offsets = self._pre_tokenize(sentence)
                _check_word_count(index, len(words), max_words)
            if not words:
                raise ValueError(f"sentence {index} has no words")
            split.append((words, offsets))
        return split, is_batched

    def _pre_tokenize(self, sentence: str) -> tuple[list[str], list[tuple[int, int]]]:
        """Words of a raw sentence and their (start, end) character offsets in it, lone surrogates dropped."""
        if not _SURROGATES.search(sentence):
            pieces = self._pre_tokenizer.pre_tokenize_str(sentence)
            return [word for word, _ in pieces], [offset for _, offset in pieces]
        kept = [position for position, char in enumerate(sentence) if not _SURROGATES.match(char)]
        pieces = self._pre_tokenizer.pre_tokenize_str("".join(sentence[position] for position in kept))
        # Offsets into the cleaned text point back to the original through `kept`.
        return [word for word, _ in pieces], [(kept[start], kept[end - 1] + 1) for _, (start, end) in pieces]

    # ---- padding ----
    def pad(
        self,
        encoded_inputs: BatchEncoding
        | list[BatchEncoding]
        | dict[str, EncodedInput]
        | dict[str, list[EncodedInput]]
        | list[dict[str, EncodedInput]],
        padding: bool | str | PaddingStrategy = True,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
        return_tensors: str | TensorType | None = None,
        verbose: bool = True,
    ) -> BatchEncoding:
        """Pad one encoded sentence or a batch (a dict of lists, or a list of dicts as data collators give) to
        the same number of words. `input_ids` pads with all-zero words; see `word_level_padding_values`."""
        if isinstance(encoded_inputs, (list, tuple)) and encoded_inputs and isinstance(encoded_inputs[0], Mapping):
            encoded_inputs = {key: [example[key] for example in encoded_inputs] for key in encoded_inputs[0]}
        if not isinstance(encoded_inputs, Mapping) or "input_ids" not in encoded_inputs:
            raise ValueError("pad() needs encodings that include input_ids")
        encoded = {key: _as_lists(value) for key, value in encoded_inputs.items()}
        if return_tensors is None:
            first = encoded_inputs["input_ids"]
            first = first[0] if isinstance(first, (list, tuple)) and first else first
            return_tensors = "pt" if type(first).__module__.startswith("torch") else None
        input_ids = encoded["input_ids"]
        if not input_ids:
            raise ValueError("pad() got an empty batch")
        # A single sentence is (words, chars); a batch is (sentences, words, chars).
        is_batched = bool(input_ids[0]) and isinstance(input_ids[0][0], (list, tuple))
        if not is_batched:
            encoded = {key: [value] for key, value in encoded.items()}
        if return_attention_mask is not False and "attention_mask" not in encoded:
            encoded["attention_mask"] = [
                [1 if any(word) else 0 for word in sentence] for sentence in encoded["input_ids"]
            ]

        padding_strategy, _, max_length, _ = self._get_padding_truncation_strategies(
            padding=padding, max_length=max_length, verbose=verbose
        )
        self._pad_batch(encoded, padding_strategy, max_length, pad_to_multiple_of, padding_side)
        if not is_batched:
            encoded = {key: value[0] for key, value in encoded.items()}
        return ElmoBatchEncoding(encoded, tensor_type=return_tensors, prepend_batch_axis=False)

    def _pad_batch(
        self,
        encoded: dict[str, Any],
        padding_strategy: PaddingStrategy,
        max_length: int | None,
        pad_to_multiple_of: int | None,
        padding_side: str | None,
    ) -> None:
        """Pads, in place, every per-word field of a batch (a dict of lists, one entry per sentence) to one number of
        words: the longest sentence, or `max_length` for "max_length", rounded up to `pad_to_multiple_of`. The only
        place where ElmoTokenizer pads."""
        if padding_strategy == PaddingStrategy.DO_NOT_PAD:
            return
        lengths = [len(sentence) for sentence in encoded["input_ids"]]
        target = max(lengths)
        if padding_strategy == PaddingStrategy.MAX_LENGTH and max_length is not None:
            target = max(max_length, target)
        if pad_to_multiple_of:
            target = -(-target // pad_to_multiple_of) * pad_to_multiple_of
        side = padding_side or self.padding_side
        padding_row: list[int] | np.ndarray = [0] * self.row_width
        if isinstance(encoded["input_ids"][0][0], np.ndarray):  # `_encode_plus`'s rows: padded with an array too
            padding_row = np.zeros(self.row_width, dtype=np.int64)
        padding_values = {**self.word_level_padding_values, "input_ids": padding_row, "word_ids": None}
        for key, values in encoded.items():
            if key in padding_values:
                encoded[key] = [
                    _pad_list(value, target - words, padding_values[key], side)
                    if key == "input_ids" or (isinstance(value, (list, tuple)) and len(value) == words)
                    else value  # not one entry per word, e.g. a sentence's label
                    for value, words in zip(values, lengths)
                ]


def _read_lexicon(path: str | os.PathLike[str]) -> dict[str, int]:
    """{token: id} of a lexicon file (a JSON object, ids 1..N, each once); ValueError naming the file otherwise."""
    try:
        with open(path, encoding="utf-8") as file:
            lexicon = json.load(file)
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not a readable JSON lexicon ({error}); expected {{token: id}}") from None
    ids = sorted(lexicon.values()) if isinstance(lexicon, dict) else None
    if (
        ids is None
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
        or ids != list(range(1, len(ids) + 1))
    ):
        raise ValueError(f"{path}: expected a JSON object {{token: id}} with the ids 1..N, each once")
    return lexicon


@functools.lru_cache(maxsize=1 << 14)
def _char_id_array(word: str, settings: tuple[int, str, str]) -> np.ndarray:
    """bilm-tf's character ids of `word` (`word_to_char_ids` with `settings` = (max_characters_per_token, bos_token,
    eos_token)) as a read-only int64 array, kept for the 16,384 words used last (about 8 MB)."""
    row = np.array(word_to_char_ids(word, *settings), dtype=np.int64)
    row.flags.writeable = False
    return row


def _check_word_count(index: int, count: int, max_words: int | None) -> None:
    if max_words is not None and count > max_words:
        raise ValueError(
            f"sentence {index} has {count} words, more than max_words={max_words}: "
            "split it, or pass truncation=True with max_length"
        )


def _as_lists(value: Any) -> Any:
    """A field as Python lists: tensors and arrays (or lists of them, one per sentence) are converted; nested Python
    lists pass as they are, without a walk over every character id."""
    if isinstance(value, (list, tuple)):
        return [item if isinstance(item, (list, tuple, int, float)) else to_py_obj(item) for item in value]
    return to_py_obj(value)


def _as_int64_array(values: list[Any]) -> np.ndarray | list[Any]:
    """`values` (nested lists of ints) as an int64 array, or unchanged when they are ragged (unpadded sentences),
    which transformers then reports as it does for any tokenizer."""
    try:
        return np.array(values, dtype=np.int64)
    except ValueError:
        return values


def _pad_list(values: list[Any], missing: int, padding_value: Any, side: str) -> list[Any]:
    if missing <= 0:
        return values
    padding = [padding_value] * missing
    return values + padding if side == "right" else padding + values


__all__ = ["ElmoTokenizer", "ElmoBatchEncoding"]
