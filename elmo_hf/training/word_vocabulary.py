"""The language model's word vocabulary (bilm-tf's `vocab.txt`): the targets of [`ElmoForPreTraining`].

ELMo's input never depends on it (every word is encoded from its characters by `ElmoTokenizer`); only the softmax
over next and previous words does. A checkpoint with a softmax keeps it as `vocab.txt` beside its weights.
"""

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from transformers import BatchEncoding
from transformers.utils import cached_file

from ..model.tokenization_elmo import ElmoTokenizer
from ..user_errors import UserInputError

VOCAB_FILE_NAME = "vocab.txt"
# A bilm-tf vocabulary starts with these three entries, in this order: their ids are 0, 1 and 2.
WORD_VOCAB_HEAD = ("<S>", "</S>", "<UNK>")
BEGIN_OF_SENTENCE_ID, END_OF_SENTENCE_ID, UNKNOWN_WORD_ID = range(3)


def find_vocab_file(name_or_path: str | os.PathLike[str], **hub_kwargs: Any) -> str | None:
    """The path of `vocab.txt` in a checkpoint folder or Hub repository, or None when it has none."""
    return cached_file(name_or_path, VOCAB_FILE_NAME, _raise_exceptions_for_missing_entries=False, **hub_kwargs)


class ElmoWordVocabulary:
    r"""
    The words a biLM predicts, in softmax row order: `<S>`, `</S>`, `<UNK>`, then one word per line, most frequent
    first (bilm-tf's `vocab.txt`).

    Args:
        words (list of str): the vocabulary, checked: `<S>`, `</S>`, `<UNK>` first, no word twice.
        source (str, defaults to "vocabulary"): the name errors give for it, e.g. its file.
    """

    def __init__(self, words: Iterable[str], source: str = "vocabulary") -> None:
        words = list(words)
        if tuple(words[:3]) != WORD_VOCAB_HEAD:
            raise UserInputError(
                f"{source}: a bilm-tf vocabulary must start with <S>, </S>, <UNK> (one per line), got {words[:3]}"
            )
        self._ids: dict[str, int] = {}
        for line, word in enumerate(words, start=1):
            if word in self._ids:
                raise UserInputError(f"{source}: word {word!r} appears twice (again on line {line})")
            self._ids[word] = line - 1
        self.words = words

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> "ElmoWordVocabulary":
        """Reads a `vocab.txt` (blank lines skipped, surrounding whitespace stripped)."""
        with open(path, encoding="utf-8") as vocab:
            return cls([line.strip() for line in vocab if line.strip()], source=str(path))

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike[str], **hub_kwargs: Any) -> "ElmoWordVocabulary":
        """Reads the `vocab.txt` of a checkpoint folder or Hub repository (e.g. `elmo_hf.DEFAULT_MODEL`)."""
        path = find_vocab_file(name_or_path, **hub_kwargs)
        if path is None:
            raise UserInputError(
                f"{name_or_path}: no {VOCAB_FILE_NAME}, the word vocabulary a language model's targets need"
            )
        return cls.from_file(path)

    def save_pretrained(self, save_directory: str | os.PathLike[str]) -> str:
        """Writes `vocab.txt` into `save_directory` (created if needed); returns its path."""
        os.makedirs(save_directory, exist_ok=True)
        path = os.path.join(save_directory, VOCAB_FILE_NAME)
        with open(path, "w", encoding="utf-8") as vocab:
            vocab.write("".join(word + "\n" for word in self.words))
        return path

    def __len__(self) -> int:
        return len(self.words)

    def word_to_id(self, word: str) -> int:
        """The softmax row of `word`; `<UNK>`'s (2) for a word not in the vocabulary."""
        return self._ids.get(word, UNKNOWN_WORD_ID)

    def sentence_labels(self, words: Iterable[str]) -> list[int]:
        """The targets of one sentence with its boundaries: `[<S>'s id, the words' ids..., </S>'s id]`."""
        return [BEGIN_OF_SENTENCE_ID, *(self.word_to_id(word) for word in words), END_OF_SENTENCE_ID]


@dataclass
class ElmoPreTrainingCollator:
    r"""
    Batches sentences into `input_ids`, `attention_mask` and `labels` for [`ElmoForPreTraining`]: the characters
    come from the tokenizer, the targets from the word vocabulary, and the tokenizer pads both.

    Args:
        tokenizer (ElmoTokenizer): encodes the words, with the sentence boundaries.
        vocabulary (ElmoWordVocabulary): gives each word's (and boundary's) target id.
        tokenize (bool, defaults to False): the sentences are raw text, split by the tokenizer; otherwise on spaces.
        max_words_per_sentence (int, optional): truncate longer sentences to this many words, boundaries included.

    Call with a list of sentences (strings). Returns tensors: input_ids (batch, words, max_characters_per_token),
    attention_mask (batch, words), labels (batch, words), -100 at padding.
    """

    tokenizer: ElmoTokenizer
    vocabulary: ElmoWordVocabulary
    tokenize: bool = False
    max_words_per_sentence: int | None = None

    def __call__(self, sentences: Sequence[str]) -> BatchEncoding:
        word_lists = [self.tokenizer.tokenize(text) if self.tokenize else text.split() for text in sentences]
        encoded = self.tokenizer(
            word_lists,
            is_split_into_words=True,
            truncation=self.max_words_per_sentence is not None,
            max_length=self.max_words_per_sentence,
        )
        features = []
        for row, words in enumerate(word_lists):
            kept = [words[index] for index in encoded.word_ids(row) if index is not None]  # after truncation
            features.append(
                {
                    "input_ids": encoded["input_ids"][row],
                    "attention_mask": encoded["attention_mask"][row],
                    "labels": self.vocabulary.sentence_labels(kept),
                }
            )
        return self.tokenizer.pad(features, return_tensors="pt")


__all__ = ["ElmoWordVocabulary", "ElmoPreTrainingCollator", "WORD_VOCAB_HEAD"]
