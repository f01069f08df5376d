"""bilm-tf's character ids: how a word becomes the row of ids that ELMo's character CNN embeds.

bilm-tf's character vocabulary is the 256 byte values, then five markers. Every id is shifted by +1 here, as
allennlp does, so that 0 can mean "no character" (a padding word is a row of zeros). The ids run 0..261.
"""

import functools
from collections.abc import Iterable

import numpy as np
import torch

# bilm-tf's ids of its markers, before the +1 shift.
BEGIN_OF_SENTENCE_CHAR = 256
END_OF_SENTENCE_CHAR = 257
BEGIN_OF_WORD_CHAR = 258
END_OF_WORD_CHAR = 259
PADDING_CHAR = 260

# Ids after the shift: 0 (no character), the bytes 1..256, the markers 257..261.
NUM_CHARACTER_IDS = PADDING_CHAR + 2

# A readable name for every id, e.g. for ElmoTokenizer.get_vocab(): bytes as <0xNN>, as byte-fallback vocabularies do.
CHARACTER_ID_NAMES = (
    "<no_char>",
    *(f"<0x{byte:02X}>" for byte in range(256)),
    "<bos_char>",
    "<eos_char>",
    "<bow_char>",
    "<eow_char>",
    "<pad_char>",
)


@functools.lru_cache(maxsize=200_000)
def word_to_char_ids(
    word: str, max_characters_per_token: int = 50, bos_token: str = "<S>", eos_token: str = "</S>"
) -> tuple[int, ...]:
    """The `max_characters_per_token` character ids bilm-tf gives `word`, shifted by +1 (0 is padding).

    The word's UTF-8 bytes (undecodable characters such as lone surrogates dropped) are truncated to
    `max_characters_per_token - 2` bytes and wrapped in begin/end-of-word markers, then padded with the padding
    character. The sentence boundaries `bos_token`/`eos_token` are encoded as the begin/end-of-sentence markers.

    Returns:
        tuple of `max_characters_per_token` ints in 1..261.
    """
    if word == bos_token:
        body = [BEGIN_OF_SENTENCE_CHAR]
    elif word == eos_token:
        body = [END_OF_SENTENCE_CHAR]
    else:
        body = list(word.encode("utf-8", "ignore")[: max_characters_per_token - 2])
    char_ids = [BEGIN_OF_WORD_CHAR, *body, END_OF_WORD_CHAR]
    char_ids += [PADDING_CHAR] * (max_characters_per_token - len(char_ids))
    return tuple(char_id + 1 for char_id in char_ids)


def char_ids_to_word(char_ids: Iterable[int], bos_token: str = "<S>", eos_token: str = "</S>") -> str:
    """The word behind a row of (shifted) character ids: the boundary tokens for the sentence markers, else the
    bytes decoded as UTF-8 (a word cut inside a character ends in U+FFFD)."""
    chars = [char_id - 1 for char_id in char_ids if char_id > 0]
    if BEGIN_OF_SENTENCE_CHAR in chars:
        return bos_token
    if END_OF_SENTENCE_CHAR in chars:
        return eos_token
    return bytes(char for char in chars if char < 256).decode("utf-8", "replace")


def distinct_rows(char_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""
    `torch.unique(char_ids, dim=0, return_inverse=True)`, faster on a CPU.

    Args:
        char_ids (`(n, chars)` int tensor): one word's character ids per row.

    Returns:
        the distinct rows `(distinct, chars)` in increasing order, and each row's index among them `(n,)`.

    On a CPU, ids that fit 16 bits are compared as byte strings by NumPy's sort, big-endian so that byte order is
    numeric order (the same rows in the same order as torch.unique): torch.unique(dim=0) compares rows one pair at a
    time, a visible share of a biLM training step on a CPU, where one NumPy sort of the rows is much cheaper.
    """
    if char_ids.device.type != "cpu" or char_ids.dim() != 2 or char_ids.numel() == 0:
        return torch.unique(char_ids, dim=0, return_inverse=True)
    smallest, largest = torch.aminmax(char_ids)
    if smallest < 0 or largest >= 2**16:
        return torch.unique(char_ids, dim=0, return_inverse=True)
    rows = np.ascontiguousarray(char_ids.numpy().astype(">u2"))
    as_bytes = rows.view(np.dtype((np.void, rows.shape[1] * 2))).ravel()  # (n,): each row one byte string
    _, first, inverse = np.unique(as_bytes, return_index=True, return_inverse=True)
    return char_ids[torch.from_numpy(first)], torch.from_numpy(inverse.reshape(-1)).long()
