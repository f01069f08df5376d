"""Task word embeddings: the paper's context-independent task input `x_k` (pretrained word vectors) for the heads.

In Peters et al. (2018) a task model reads `[x_k; ELMo_k]`, where `x_k` is its own word representation (GloVe
vectors, often with a character CNN). `ElmoTaskWordEmbedding` (modeling_elmo.py) is that word part: a trainable table
over a vocabulary built from the task's training data (`build_task_word_vocab`), stored in the head's configuration
(`task_word_vocab`) so that `from_pretrained`, the pipelines and `trust_remote_code` rebuild the same lookup. Its
rows can start from a word-vectors text file (`read_word_vectors`: GloVe or word2vec text) or from the biLM's own
softmax embeddings (`softmax_word_vectors`).

The head finds each word from its character ids, so it needs no input besides the tokenizer's. This module holds
the tools around it (vocabulary, pretrained vectors, the example scripts' options); the model does not import it.
"""

import math
import os
from collections import Counter
from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..user_errors import UserInputError

if TYPE_CHECKING:  # the model does not import this module, nor this module the model
    from ..model.configuration_elmo import ElmoConfig
    from ..model.modeling_elmo import ElmoForSequenceClassification, ElmoForTokenClassification

    ElmoTaskHead = ElmoForTokenClassification | ElmoForSequenceClassification


def build_task_word_vocab(
    sentences: Iterable[Iterable[str]], min_count: int = 2, lowercase: bool = True, max_size: int | None = None
) -> list[str]:
    r"""
    The task vocabulary of a training set: words seen at least `min_count` times, most frequent first (ties in
    alphabetical order), at most `max_size`.

    Args:
        sentences (iterable of lists of str): the training sentences' words.
        min_count (int): fewest occurrences to keep a word.
        lowercase (bool): count and look up lowercased words (`config.task_word_lowercase`).
        max_size (int, optional): most words to keep.

    Returns:
        list of str: `config.task_word_vocab` (row 0 of the embedding is the unknown word, row i + 1 is word i).
    """
    counts = Counter(word.lower() if lowercase else word for words in sentences for word in words)
    kept = sorted((word for word, count in counts.items() if count >= min_count), key=lambda w: (-counts[w], w))
    return kept if max_size is None else kept[:max_size]


def add_pretrained_words(vocab: Iterable[str], pretrained_words: Iterable[str], lowercase: bool = True) -> list[str]:
    r"""
    `vocab` followed by every word of `pretrained_words` it lacks (lowercased when `lowercase`), in their order: a
    test word never seen in training then keeps its pretrained vector instead of becoming the unknown word.

    Args:
        vocab (list of str): the task vocabulary (`build_task_word_vocab`).
        pretrained_words (iterable of str): the words that have a pretrained vector (`pretrained_word_list`).
        lowercase (bool): `config.task_word_lowercase`.

    Returns:
        list of str: the extended vocabulary.
    """
    known = set(vocab)
    added = dict.fromkeys(word.lower() if lowercase else word for word in pretrained_words)
    return list(vocab) + [word for word in added if word not in known]


def pretrained_word_list(vectors_file: str | None = None, bilm_path: str | os.PathLike[str] | None = None) -> list[str]:
    """The words that have a pretrained vector: those of `vectors_file` (GloVe or word2vec text), else those of the
    biLM's softmax vocabulary at `bilm_path` (its `vocab.txt`, without `<S>`, `</S>`, `<UNK>`); [] for neither."""
    if vectors_file is not None:
        return list(read_word_vectors(vectors_file, lowercase=False))
    if bilm_path is None:
        return []
    from .word_vocabulary import WORD_VOCAB_HEAD, ElmoWordVocabulary, find_vocab_file

    if find_vocab_file(bilm_path) is None:
        return []
    return ElmoWordVocabulary.from_pretrained(bilm_path).words[len(WORD_VOCAB_HEAD) :]


def read_word_vectors(
    path: str | os.PathLike[str], words: Container[str] | None = None, lowercase: bool = True
) -> dict[str, torch.Tensor]:
    r"""
    Word vectors from a text file, GloVe (`word v1 ... vd` per line) or word2vec text (the same after a `count dim`
    header line).

    Args:
        path (str): the file (UTF-8).
        words (set of str, optional): keep only these words (the task vocabulary); all when None.
        lowercase (bool): key the vectors by lowercased word (the first one seen wins).

    Returns:
        dict word -> `(dim,)` float tensor.

    Raises:
        UserInputError: one line naming the file and the line, for a line that is not a word and `dim` numbers.
    """
    vectors: dict[str, torch.Tensor] = {}
    dim: int | None = None
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            fields = line.rstrip("\n").rstrip().split(" ")
            if number == 1 and len(fields) == 2 and all(field.isdigit() for field in fields):
                dim = int(fields[1])  # word2vec's header
                continue
            if not line.strip():
                continue
            word, values = fields[0], fields[1:]
            dim = len(values) if dim is None else dim
            try:
                numbers = [float(value) for value in values]
            except ValueError:
                numbers = None
            if not word or len(values) != dim or numbers is None or not all(map(math.isfinite, numbers)):
                raise UserInputError(
                    f"{path}: line {number}: expected a word and {dim} numbers separated by spaces, got "
                    f"{line.strip()[:60]!r}"
                )
            key = word.lower() if lowercase else word
            if (words is None or key in words) and key not in vectors:
                vectors[key] = torch.tensor(numbers)
    return vectors


def softmax_word_vectors(
    bilm_path: str | os.PathLike[str], words: Iterable[str], lowercase: bool = True
) -> dict[str, torch.Tensor]:
    r"""
    The biLM's softmax embeddings (`lm_head.weight`, `projection_dim` wide) of `words`, when the checkpoint at
    `bilm_path` has a softmax and its `vocab.txt`; an empty dict otherwise. A lowercased task word takes the row of
    the word itself, else of its capitalised or upper-case form.
    """
    from safetensors import safe_open
    from transformers.utils import cached_file

    from .word_vocabulary import ElmoWordVocabulary, find_vocab_file

    vocab_file = find_vocab_file(bilm_path)
    weights_file = cached_file(bilm_path, "model.safetensors", _raise_exceptions_for_missing_entries=False)
    if vocab_file is None or weights_file is None:
        return {}
    with safe_open(weights_file, "pt") as weights:
        if "lm_head.weight" not in weights.keys():
            return {}
        softmax = weights.get_tensor("lm_head.weight")  # (vocab_size, projection_dim)
    vocabulary = ElmoWordVocabulary.from_pretrained(bilm_path)
    rows = {word: row for row, word in enumerate(vocabulary.words)}
    vectors: dict[str, torch.Tensor] = {}
    for word in words:
        forms = (word, word.capitalize(), word.upper()) if lowercase else (word,)
        row = next((rows[form] for form in forms if form in rows), None)
        if row is not None:
            vectors[word] = softmax[row].float()
    return vectors


def initialise_task_words(
    model: "ElmoTaskHead", vectors_file: str | None = None, bilm_path: str | os.PathLike[str] | None = None
) -> str:
    r"""
    Starts the task word embedding of `model` (a head with `config.task_word_vocab`) from pretrained vectors: the
    words of `vectors_file` (GloVe or word2vec text), else those of the biLM's softmax at `bilm_path`; the other
    rows keep their random start.

    Returns:
        str: what was loaded, e.g. "task words: 8,012 of 9,731 from glove.txt".
    """
    task_words = model.task_encoder.task_words
    if task_words is None:
        raise UserInputError("task word vectors: the model has no task word embedding (set a task vocabulary first)")
    dim, words = task_words.embedding.embedding_dim, set(task_words.word_rows)
    if vectors_file is not None:
        vectors, source = read_word_vectors(vectors_file, words, task_words.lowercase), vectors_file
    elif bilm_path is not None:
        vectors, source = softmax_word_vectors(bilm_path, words, task_words.lowercase), f"{bilm_path}'s softmax"
    else:
        return f"task words: {len(words):,}, randomly initialised"
    width = len(next(iter(vectors.values()))) if vectors else dim
    if width != dim:
        raise UserInputError(
            f"{source}: vectors of width {width}, but the task word embedding has "
            f"task_word_embedding_dim={dim}; set it to {width}"
        )
    return f"task words: {task_words.load_vectors(vectors):,} of {len(words):,} from {source}"


@dataclass
class TaskWordArguments:
    """The task input options of the example scripts (`HfArgumentParser`); unset ones keep the loaded config's."""

    use_input_elmo: bool | None = field(
        default=None,
        metadata={"help": "Mix the biLM's layers into the task input (false: the task model without ELMo)."},
    )
    use_bilm_token_layer: bool | None = field(default=None, metadata={"help": "Put the biLM's token layer in x_k."})
    task_word_min_count: int | None = field(
        default=None,
        metadata={
            "help": "Add a trainable task word embedding to x_k over the training words seen at least this often."
        },
    )
    task_word_embedding_dim: int | None = field(default=None, metadata={"help": "Width of the task word embedding."})
    task_word_dropout: float | None = field(
        default=None,
        metadata={"help": "While training, look each word up as the unknown task word with this probability."},
    )
    task_word_vectors: str | None = field(
        default=None, metadata={"help": "Start the task word embedding from this GloVe or word2vec text file."}
    )
    task_words_from_bilm: bool = field(
        default=False,
        metadata={
            "help": "Start the task word embedding from the biLM's softmax embeddings (its width is projection_dim)."
        },
    )
    task_word_pretrained_vocab: bool = field(
        default=False,
        metadata={
            "help": "Give every word with a pretrained vector (of --task_word_vectors, or of the biLM's softmax with "
            "--task_words_from_bilm) a row too, so that words unseen in training keep their vector."
        },
    )

    def head_options(
        self,
        config: "ElmoConfig",
        train_sentences: Iterable[Iterable[str]],
        bilm_path: str | os.PathLike[str] | None = None,
    ) -> dict[str, Any]:
        """Config fields for `from_pretrained`: the task input flags, and a vocabulary built from `train_sentences`
        (lists of words) unless `config` (a trained head) has one; with `task_word_pretrained_vocab`, the words of
        the pretrained vectors join it (the biLM's at `bilm_path` with `task_words_from_bilm`)."""
        options = {
            name: getattr(self, name)
            for name in ("use_input_elmo", "use_bilm_token_layer", "task_word_embedding_dim", "task_word_dropout")
            if getattr(self, name) is not None
        }
        if self.task_words_from_bilm and self.task_word_embedding_dim is None:
            options["task_word_embedding_dim"] = config.projection_dim
        if self.task_word_min_count is not None and not config.task_word_vocab:
            vocab = build_task_word_vocab(train_sentences, self.task_word_min_count, config.task_word_lowercase)
            if self.task_word_pretrained_vocab:
                if self.task_word_vectors is None and not self.task_words_from_bilm:
                    raise UserInputError(
                        "--task_word_pretrained_vocab: give --task_word_vectors FILE or --task_words_from_bilm, the "
                        "vectors whose words join the vocabulary"
                    )
                words = pretrained_word_list(self.task_word_vectors, bilm_path if self.task_words_from_bilm else None)
                vocab = add_pretrained_words(vocab, words, config.task_word_lowercase)
            options["task_word_vocab"] = vocab
        return options

    def initialise(self, model: "ElmoTaskHead", bilm_path: str | os.PathLike[str] | None) -> str | None:
        """Loads the pretrained task word vectors asked for into a new head; returns what it did, or None."""
        if model.task_encoder.task_words is None or self.task_word_min_count is None:
            return None
        return initialise_task_words(model, self.task_word_vectors, bilm_path if self.task_words_from_bilm else None)
