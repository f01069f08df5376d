"""Property-based tests (hypothesis): the tokenizer's ids, boundaries, truncation and padding for any words, and
the model's independence from batch composition."""

import torch
from helpers import assert_same, tiny_model
from hypothesis import given, settings
from hypothesis import strategies as st

from elmo_hf import ElmoTokenizer

BEGIN_OF_SENTENCE, END_OF_SENTENCE, BEGIN_OF_WORD, END_OF_WORD, PADDING_CHAR = 257, 258, 259, 260, 261
SETTINGS = settings(max_examples=25, deadline=None, database=None)

# Any characters, lone surrogates included; a word must hold something other than whitespace.
characters = st.one_of(st.characters(), st.sampled_from(["\ud800", "\udfff", "\u200d", "\x00"]))
words = st.text(alphabet=characters, min_size=1, max_size=30).filter(lambda word: word.strip())
sentences = st.lists(words, min_size=1, max_size=8)
batches = st.lists(sentences, min_size=1, max_size=5)


def kept_bytes(word, max_characters_per_token):
    """What bilm-tf keeps of a word: its UTF-8 bytes, unencodable characters dropped, cut to max - 2."""
    return word.encode("utf-8", "ignore")[: max_characters_per_token - 2]


@SETTINGS
@given(batch=batches, max_characters_per_token=st.integers(3, 60))
def test_ids_boundaries_and_word_rows(batch, max_characters_per_token):
    tokenizer = ElmoTokenizer(max_characters_per_token=max_characters_per_token)
    encoding = tokenizer(batch, is_split_into_words=True)
    for index, sentence in enumerate(batch):
        rows = encoding["input_ids"][index]
        assert len(rows) == len(sentence) + 2
        assert all(len(row) == max_characters_per_token and all(0 <= i <= 261 for i in row) for row in rows)
        padding = [PADDING_CHAR] * (max_characters_per_token - 3)
        assert rows[0] == [BEGIN_OF_WORD, BEGIN_OF_SENTENCE, END_OF_WORD, *padding]
        assert rows[-1] == [BEGIN_OF_WORD, END_OF_SENTENCE, END_OF_WORD, *padding]
        for word, row in zip(sentence, rows[1:-1]):
            if word in ("<S>", "</S>"):
                continue
            body = kept_bytes(word, max_characters_per_token)
            assert len(body) == min(len(word.encode("utf-8", "ignore")), max_characters_per_token - 2)
            assert row[0] == BEGIN_OF_WORD and row[len(body) + 1] == END_OF_WORD
            assert bytes(i - 1 for i in row[1 : len(body) + 1]) == body
            assert set(row[len(body) + 2 :]) <= {PADDING_CHAR}
        assert encoding.word_ids(index) == [None, *range(len(sentence)), None]


@SETTINGS
@given(batch=batches, pad_to_multiple_of=st.sampled_from([None, 1, 4, 8]))
def test_padding(batch, pad_to_multiple_of):
    tokenizer = ElmoTokenizer(max_characters_per_token=12)
    unpadded = tokenizer(batch, is_split_into_words=True)["input_ids"]
    encoding = tokenizer(batch, is_split_into_words=True, padding=True, pad_to_multiple_of=pad_to_multiple_of)
    longest = max(len(sentence) for sentence in batch) + 2
    width = len(encoding["input_ids"][0])
    assert width >= longest and width % (pad_to_multiple_of or 1) == 0 and width < longest + (pad_to_multiple_of or 1)
    for rows, mask, original in zip(encoding["input_ids"], encoding["attention_mask"], unpadded):
        assert len(rows) == len(mask) == width
        assert rows[: len(original)] == original
        assert all(row == [0] * 12 for row in rows[len(original) :])
        assert mask == [1] * len(original) + [0] * (width - len(original))


@SETTINGS
@given(batch=batches, max_length=st.integers(3, 12), left=st.booleans())
def test_truncation_keeps_the_boundaries(batch, max_length, left):
    tokenizer = ElmoTokenizer(max_characters_per_token=12, truncation_side="left" if left else "right")
    full = tokenizer(batch, is_split_into_words=True)["input_ids"]
    cut = tokenizer(batch, is_split_into_words=True, truncation=True, max_length=max_length)
    for index, sentence in enumerate(batch):
        kept = min(len(sentence), max_length - 2)
        rows = cut["input_ids"][index]
        assert len(rows) == kept + 2
        assert rows[0] == full[index][0] and rows[-1] == full[index][-1]
        start = len(sentence) - kept if left else 0
        assert rows[1:-1] == full[index][1 + start : 1 + start + kept]
        assert cut.word_ids(index) == [None, *range(start, start + kept), None]


@SETTINGS
@given(text=st.text(alphabet=characters, max_size=60))
def test_raw_text_offsets_point_at_the_words(text):
    tokenizer = ElmoTokenizer(max_characters_per_token=12)
    words = tokenizer.tokenize(text)
    if not words:
        return
    encoding = tokenizer(text, return_offsets_mapping=True, add_special_tokens=False)
    assert len(encoding["input_ids"]) == len(words)
    for word, (start, end) in zip(words, encoding["offset_mapping"]):
        # The original span is the word, give or take the lone surrogates dropped from it.
        assert "".join(char for char in text[start:end] if not "\ud800" <= char <= "\udfff") == word


MODEL = tiny_model(seed=1)
MODEL_TOKENIZER = ElmoTokenizer(max_characters_per_token=20)
short_words = st.text(alphabet="abcdéü東😀.-", min_size=1, max_size=25)


@settings(max_examples=15, deadline=None, database=None)
@given(batch=st.lists(st.lists(short_words, min_size=1, max_size=6), min_size=1, max_size=4), data=st.data())
def test_batch_composition_does_not_change_a_sentence(batch, data):
    order = data.draw(st.permutations(range(len(batch))))
    encoding = MODEL_TOKENIZER([batch[i] for i in order], is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        layers = torch.stack(MODEL(**encoding, output_hidden_states=True).hidden_states, dim=1)  # (B, L+1, W, 2P)
    for row, index in enumerate(order):
        alone = MODEL_TOKENIZER([batch[index]], is_split_into_words=True, return_tensors="pt")
        with torch.no_grad():
            expected = torch.stack(MODEL(**alone, output_hidden_states=True).hidden_states, dim=1)[0]
        length = expected.shape[1]
        assert_same(layers[row, :, :length], expected)
        assert (layers[row, :, length:] == 0).all()  # padding is exactly 0
