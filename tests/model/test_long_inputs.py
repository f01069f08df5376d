"""Sentences longer than a user-set limit: ElmoTokenizer(max_words=N) rejects them before encoding anything."""

import tracemalloc

import pytest

from elmo_hf import ElmoTokenizer


@pytest.fixture
def limited():
    return ElmoTokenizer(max_characters_per_token=20, max_words=5)


def test_sentences_up_to_the_limit_pass(limited):
    encoding = limited([["w"] * 5, ["w"]], is_split_into_words=True, padding=True)
    assert [len(row) for row in encoding["input_ids"]] == [7, 7]  # boundaries do not count toward max_words


@pytest.mark.parametrize(
    "text, is_split_into_words, message",
    [
        ([["w"] * 5, ["w"] * 6], True, "sentence 1 has 6 words, more than max_words=5"),
        ("one two three four five six seven", False, "sentence 0 has 7 words, more than max_words=5"),
        (["short", "a b c d e ."], False, "sentence 1 has 6 words, more than max_words=5"),
    ],
)
def test_longer_sentences_are_rejected(limited, text, is_split_into_words, message):
    with pytest.raises(ValueError) as raised:
        limited(text, is_split_into_words=is_split_into_words)
    assert str(raised.value) == f"{message}: split it, or pass truncation=True with max_length"


def test_truncation_applies_before_the_limit(limited):
    encoding = limited([["w"] * 50], is_split_into_words=True, truncation=True, max_length=7)
    assert len(encoding["input_ids"][0]) == 7  # <S> + 5 words + </S>
    with pytest.raises(ValueError, match="sentence 0 has 50 words, more than max_words=5"):
        limited([["w"] * 50], is_split_into_words=True, truncation=True, max_length=8)


def test_no_limit_by_default():
    assert ElmoTokenizer().max_words is None
    encoding = ElmoTokenizer(max_characters_per_token=20)([["w"] * 3000], is_split_into_words=True)
    assert len(encoding["input_ids"][0]) == 3002


@pytest.mark.parametrize("value", [0, -3, 2.5, "10", True])
def test_bad_limits_are_rejected(value):
    with pytest.raises(ValueError, match=f"max_words must be a positive int or None, got {value!r}"):
        ElmoTokenizer(max_words=value)


def test_rejection_happens_before_encoding_so_memory_stays_bounded(limited):
    words = ["word"] * 200_000
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="sentence 0 has 200000 words"):
            limited([words], is_split_into_words=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Encoding these words peaks at about 70 MB (200,000 lists of 20 ids, offsets, word ids); rejecting them
    # allocates almost nothing (a few KB measured).
    assert peak < 1_000_000
