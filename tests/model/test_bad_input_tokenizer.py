"""Bad and odd inputs to ElmoTokenizer and ElmoModel: each gets a clear error naming the position, or a result
pinned here (bilm-tf's byte-level behaviour)."""

import pytest
import torch
from helpers import tiny_model

from elmo_hf import ElmoTokenizer

# With max_characters_per_token=20 (the `tokenizer` fixture) a word is 20 ids: 259 (begin of word), at most
# 18 UTF-8 bytes shifted by +1, 260 (end of word), then 261 (padding character).
BEGIN_OF_WORD, END_OF_WORD, PADDING_CHAR = 259, 260, 261


def expected_ids(byte_values, width=20):
    """The pinned ids of a word whose kept UTF-8 bytes are `byte_values`."""
    ids = [BEGIN_OF_WORD, *(b + 1 for b in byte_values), END_OF_WORD]
    return ids + [PADDING_CHAR] * (width - len(ids))


def encode_words(tokenizer, words):
    """Character ids of the words of one pre-split sentence, boundaries left out."""
    return tokenizer([words], is_split_into_words=True, add_special_tokens=False)["input_ids"][0]


# ---- errors ----


@pytest.mark.parametrize(
    "text, is_split_into_words, error, message",
    [
        ("", False, ValueError, "sentence 0 has no words"),
        (" \t\n\u2028", False, ValueError, "sentence 0 has no words"),
        (["fine", "   "], False, ValueError, "sentence 1 has no words"),
        ([], False, ValueError, "the batch is empty: give at least one sentence"),
        ([], True, ValueError, "sentence 0 has no words"),
        ([["a"], []], True, ValueError, "sentence 1 has no words"),
        (None, False, TypeError, "text must be a string, a list of strings or a list of word lists, got None"),
        (None, True, TypeError, "text must be a string, a list of strings or a list of word lists, got None"),
        (["a b", None], False, TypeError, "sentence 1 must be a string, got NoneType: None"),
        (["a b", 7], False, TypeError, "sentence 1 must be a string, got int: 7"),
        (42, False, TypeError, "text must be a string or a list of strings, got int"),
        ("a b", True, TypeError, "the input must be a list of words or a list of such lists, got str"),
        ([["a", "b"], ["c", None]], True, TypeError, "sentence 1, word 1 must be a string, got NoneType: None"),
        ([["a", 3.5]], True, TypeError, "sentence 0, word 1 must be a string, got float: 3.5"),
        ([["a", b"caf\xe9"]], True, TypeError, "sentence 0, word 1 must be a string, got bytes: b'caf\\xe9'"),
        ([["a"], ["b", ""]], True, ValueError, "sentence 1, word 1 is empty or only whitespace: ''"),
        ([["a", " \t"]], True, ValueError, "sentence 0, word 1 is empty or only whitespace: ' \\t'"),
    ],
)
def test_bad_input_is_an_error_naming_its_position(tokenizer, text, is_split_into_words, error, message):
    with pytest.raises(error) as raised:
        tokenizer(text, is_split_into_words=is_split_into_words)
    assert str(raised.value).endswith(message)


# ---- pinned results ----


def test_long_word_keeps_its_first_bytes(tokenizer):
    # bilm-tf truncates a word's UTF-8 bytes to max_characters_per_token - 2 = 18.
    assert encode_words(tokenizer, ["a" * 1000]) == [expected_ids([ord("a")] * 18)]
    assert encode_words(tokenizer, ["b" * 18]) == [expected_ids([ord("b")] * 18)]


def test_multi_byte_truncation_may_cut_a_character(tokenizer):
    # 4 emoji are 16 bytes; the fifth keeps its first 2 bytes (F0 9F), as bilm-tf does.
    assert encode_words(tokenizer, ["😀" * 5]) == [expected_ids([0xF0, 0x9F, 0x98, 0x80] * 4 + [0xF0, 0x9F])]
    # "a" and 5 CJK characters are 16 bytes; the sixth keeps 2 of its 3 bytes (E6 9D of 東 = E6 9D B1).
    (row,) = encode_words(tokenizer, ["a" + "東" * 6])
    assert row == expected_ids([0x61] + [0xE6, 0x9D, 0xB1] * 5 + [0xE6, 0x9D])
    # Decoding shows the cut character as U+FFFD.
    assert tokenizer.convert_ids_to_tokens(row) == "a東東東東東\ufffd"


def test_lone_surrogates_and_invalid_utf8_are_dropped(tokenizer):
    # bilm-tf encodes with errors="ignore": characters with no UTF-8 form disappear.
    invalid_utf8 = b"caf\xe9".decode("utf-8", "surrogateescape")  # "caf\udce9"
    assert encode_words(tokenizer, ["a\ud800b", invalid_utf8, "\udfff"]) == [
        expected_ids(b"ab"),
        expected_ids(b"caf"),
        expected_ids(b""),  # nothing left: only the word markers
    ]
    encoding = tokenizer("x a\ud800b", return_offsets_mapping=True, add_special_tokens=False)
    assert encoding["input_ids"] == [expected_ids(b"x"), expected_ids(b"ab")]
    assert encoding["offset_mapping"] == [(0, 1), (2, 5)]  # offsets into the original string
    assert tokenizer.tokenize("\ud800 \udc00") == []


def test_control_characters_are_bytes(tokenizer):
    assert encode_words(tokenizer, ["a\x00b", "\x07", "\x7f"]) == [
        expected_ids([0x61, 0x00, 0x62]),
        expected_ids([0x07]),
        expected_ids([0x7F]),
    ]
    # In raw text, a control character that is not whitespace is split off like punctuation; tab and
    # newline are whitespace.
    assert tokenizer.tokenize("a\x00b \x07 c\x1bd\te\nf") == ["a", "\x00", "b", "\x07", "c", "\x1b", "d", "e", "f"]


def test_zero_width_joiner_emoji_and_cjk(tokenizer):
    family = "👨\u200d👩\u200d👧"
    # Pre-split words keep every byte, joiners included (E2 80 8D), up to the 18-byte limit.
    (row,) = encode_words(tokenizer, [family])
    assert row == expected_ids(list(family.encode("utf-8"))[:18])
    assert row[1:19] == [b + 1 for b in b"\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7"]
    # Raw text splits on the joiner, which is neither a word character nor a space.
    joiner = "\u200d"
    pieces = ["fam", joiner, "ily", "👨", joiner, "👩", joiner, "👧"]
    assert tokenizer.tokenize(f"fam{joiner}ily {family}") == pieces
    assert tokenizer.tokenize("東京は 晴れ。") == ["東京は", "晴れ", "。"]
    assert encode_words(tokenizer, ["晴れ"]) == [expected_ids(list("晴れ".encode()))]


def test_boundary_strings_as_words_get_the_boundary_ids(tokenizer):
    # A word equal to "<S>" or "</S>" is the sentence boundary, as in bilm-tf's vocabulary.
    assert encode_words(tokenizer, ["<S>", "</S>"]) == [
        [BEGIN_OF_WORD, 257, END_OF_WORD] + [PADDING_CHAR] * 17,
        [BEGIN_OF_WORD, 258, END_OF_WORD] + [PADDING_CHAR] * 17,
    ]


def test_ten_thousand_word_sentence(tokenizer):
    words = [f"w{index}" for index in range(10_000)]
    encoding = tokenizer([words], is_split_into_words=True, return_tensors="pt")
    assert encoding["input_ids"].shape == (1, 10_002, 20)
    assert encoding["attention_mask"].sum().item() == 10_002
    assert encoding["input_ids"][0, 10_000].tolist() == expected_ids(b"w9999")


def test_ten_thousand_sentence_batch(tokenizer):
    sentences = [["sentence", str(index)] + ["pad"] * (index % 3) for index in range(10_000)]
    encoding = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    assert encoding["input_ids"].shape == (10_000, 6, 20)
    assert encoding["attention_mask"].sum(1)[:4].tolist() == [4, 5, 6, 4]
    assert encoding["input_ids"][9_999, 2].tolist() == expected_ids(b"9999")
    assert encoding.word_ids(9_999) == [None, 0, 1, None, None, None]


# ---- model inputs ----


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def batch():
    return ElmoTokenizer(max_characters_per_token=20)([["a", "b"]], is_split_into_words=True, return_tensors="pt")


@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda ids: ids.float(), TypeError, "input_ids must be an integer tensor of character ids, got torch.float32"),
        (lambda ids: ids.bool(), TypeError, "input_ids must be an integer tensor of character ids, got torch.bool"),
        (lambda ids: ids.tolist(), TypeError, "input_ids must be an integer tensor of character ids, got list"),
        (lambda ids: ids[0], ValueError, "input_ids must have shape (batch, words, 20) with at least one word"),
        (lambda ids: ids[:0], ValueError, "got (0, 4, 20)"),
        (lambda ids: ids[:, :0], ValueError, "got (1, 0, 20)"),
        (
            lambda ids: ids.index_put((torch.tensor(0), torch.tensor(2), torch.tensor(5)), torch.tensor(262)),
            ValueError,
            "input_ids must hold character ids in 0..261, got 262 at sentence 0, word 2, character 5",
        ),
        (
            lambda ids: ids.index_put((torch.tensor(0), torch.tensor(1), torch.tensor(0)), torch.tensor(-1)),
            ValueError,
            "got -1 at sentence 0, word 1, character 0",
        ),
    ],
)
def test_bad_input_ids_are_errors(model, batch, change, error, message):
    with pytest.raises(error) as raised:
        model(change(batch["input_ids"]))
    assert message in str(raised.value)


@pytest.mark.parametrize(
    "mask, message",
    [
        (torch.tensor([[1, 1, 2, 1]]), "attention_mask must hold only 0 (padding) and 1 (word)"),
        (torch.tensor([[1.0, 0.5, 1.0, 1.0]]), "attention_mask must hold only 0 (padding) and 1 (word)"),
        (torch.tensor([[1, 1, 1]]), "attention_mask must have shape (1, 4) (batch, words), got (1, 3)"),
        (torch.tensor([[0, 1, 1, 1]]), "ElmoModel needs right padding"),
    ],
)
def test_bad_attention_masks_are_errors(model, batch, mask, message):
    with pytest.raises(ValueError) as raised:
        model(batch["input_ids"], attention_mask=mask)
    assert message in str(raised.value)


def test_a_row_of_padding_gives_zeros(model, batch):
    input_ids = torch.cat([batch["input_ids"], torch.zeros_like(batch["input_ids"])])  # second row: no words
    with torch.no_grad():
        output = model(input_ids, output_hidden_states=True)
    assert all(layer[1].abs().max().item() == 0.0 for layer in output.hidden_states)
    with torch.no_grad():
        alone = model(batch["input_ids"]).last_hidden_state
    assert torch.allclose(output.last_hidden_state[:1], alone, atol=1e-6, rtol=0)


def test_odd_words_run_through_the_model(model):
    tokenizer = ElmoTokenizer(max_characters_per_token=20)
    words = ["a" * 1000, "😀" * 5, "a\ud800b", "\x00", "👨\u200d👩", "東京", "\udfff"]
    batch = tokenizer([words], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch).last_hidden_state
    assert output.shape == (1, 9, 16) and torch.isfinite(output).all()
