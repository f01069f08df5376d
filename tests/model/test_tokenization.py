import numpy as np
import pytest
import torch
from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding

from elmo_hf import ElmoConfig, ElmoTokenizer
from elmo_hf.model.char_ids import distinct_rows, word_to_char_ids


def ids(*values, length=20):
    """Shifted ids: begin-of-word, `values`, end-of-word, padding; as bilm-tf gives them after its +1."""
    row = [259, *[v + 1 for v in values], 260]
    return row + [261] * (length - len(row))


def test_bilm_tf_character_scheme():
    assert list(word_to_char_ids("Hi", 20)) == ids(ord("H"), ord("i"))
    assert list(word_to_char_ids("<S>", 20)) == ids(256)
    assert list(word_to_char_ids("</S>", 20)) == ids(257)
    assert list(word_to_char_ids("é", 20)) == ids(0xC3, 0xA9)  # UTF-8 bytes, not characters
    assert list(word_to_char_ids("", 20)) == ids()


def test_default_word_length_is_bilm_tfs_50_and_undecodable_characters_are_dropped():
    assert list(word_to_char_ids("Hi")) == ids(ord("H"), ord("i"), length=50)
    assert ElmoTokenizer().max_characters_per_token == 50
    # A lone surrogate has no UTF-8 bytes: dropped, as bilm-tf's encode("utf-8", "ignore").
    assert list(word_to_char_ids("a\ud800b", 20)) == ids(ord("a"), ord("b"))


def test_long_words_are_truncated_to_max_chars_minus_two_bytes():
    row = list(word_to_char_ids("x" * 30, 20))
    assert row == [259] + [ord("x") + 1] * 18 + [260]
    # A multi-byte character cut in the middle keeps its first byte, as bilm-tf's byte slicing does.
    assert list(word_to_char_ids("a" * 17 + "é", 20))[-2:] == [0xC3 + 1, 260]


def test_boundaries_padding_and_mask(tokenizer):
    batch = tokenizer([["The", "cat"], ["Hi"]], is_split_into_words=True, padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (2, 4, 20)
    assert batch["input_ids"].dtype == torch.long
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert batch["input_ids"][1, 0].tolist() == ids(256) and batch["input_ids"][1, 2].tolist() == ids(257)
    assert not batch["input_ids"][1, 3].any()
    assert batch.word_ids(0) == [None, 0, 1, None] and batch.word_ids(1) == [None, 0, None, None]


def test_tensors_equal_the_lists_and_ragged_batches_still_need_padding(tokenizer):
    # input_ids reach torch through one NumPy array (tokenization_elmo.ElmoBatchEncoding): same values as the lists.
    sentences = [["The", "cat", "sat"], ["Hi"]]
    lists = tokenizer(sentences, is_split_into_words=True, padding=True)["input_ids"]
    tensors = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")["input_ids"]
    assert tensors.dtype == torch.long and tensors.tolist() == lists
    single = tokenizer(["Hi", "there"], is_split_into_words=True, return_tensors="pt")["input_ids"]
    assert single.shape == (1, 4, 20)
    with pytest.raises(ValueError, match="padding=True"):
        tokenizer(sentences, is_split_into_words=True, return_tensors="pt")


def test_without_special_tokens(tokenizer):
    encoded = tokenizer(["a", "b"], is_split_into_words=True, add_special_tokens=False)
    assert encoded["input_ids"] == [ids(ord("a")), ids(ord("b"))]
    assert encoded.word_ids() == [0, 1]


def test_raw_text_words_and_offsets(tokenizer):
    text = "Hello world, U.S. isn't here."
    encoded = tokenizer(text, return_offsets_mapping=True)
    words = [text[start:end] for start, end in encoded["offset_mapping"][1:-1]]
    assert words == ["Hello", "world", ",", "U.S", ".", "isn't", "here", "."]
    assert tokenizer.tokenize(text) == words
    assert encoded["offset_mapping"][0] == (0, 0) and encoded["offset_mapping"][-1] == (0, 0)
    assert tokenizer.convert_ids_to_tokens(encoded["input_ids"]) == ["<S>", *words, "</S>"]


def test_decode_a_word_a_sentence_and_a_batch(tokenizer):
    batch = tokenizer(["the cat sat", "a dog"], padding=True, return_tensors="pt")["input_ids"]  # (2, 5, chars)
    assert tokenizer.decode(batch[0][2]) == "cat"  # one word's row: the word, not its characters spaced out
    assert tokenizer.decode(batch[0]) == "<S> the cat sat </S>"  # a sentence: one string, not one per word
    assert tokenizer.decode(batch[1].tolist(), skip_special_tokens=True) == "a dog"  # padding rows dropped
    assert tokenizer.decode(batch, skip_special_tokens=True) == ["the cat sat", "a dog"]
    assert tokenizer.batch_decode(batch) == ["<S> the cat sat </S>", "<S> a dog </S>"]
    assert tokenizer.decode(batch[0][0], skip_special_tokens=True) == ""


def test_word_level_truncation_keeps_boundaries(tokenizer):
    words = ["w0", "w1", "w2", "w3", "w4"]
    right = tokenizer(words, is_split_into_words=True, truncation=True, max_length=4)
    assert tokenizer.convert_ids_to_tokens(right["input_ids"]) == ["<S>", "w0", "w1", "</S>"]
    assert right.word_ids() == [None, 0, 1, None]
    tokenizer.truncation_side = "left"
    left = tokenizer(words, is_split_into_words=True, truncation=True, max_length=4)
    assert tokenizer.convert_ids_to_tokens(left["input_ids"]) == ["<S>", "w3", "w4", "</S>"]
    assert left.word_ids() == [None, 3, 4, None]


def test_padding_to_max_length_and_multiple(tokenizer):
    encoded = tokenizer([["a"]], is_split_into_words=True, padding="max_length", max_length=6)
    assert encoded["attention_mask"] == [[1, 1, 1, 0, 0, 0]]
    encoded = tokenizer([["a", "b"]], is_split_into_words=True, padding=True, pad_to_multiple_of=8)
    assert len(encoded["input_ids"][0]) == 8 and encoded.word_ids(0) == [None, 0, 1, None] + [None] * 4


def test_data_collator_with_padding(tokenizer):
    features = [dict(tokenizer(words, is_split_into_words=True)) for words in (["a", "b", "c"], ["d"])]
    batch = DataCollatorWithPadding(tokenizer)(features)
    assert batch["input_ids"].shape == (2, 5, 20)
    assert batch["attention_mask"].tolist() == [[1] * 5, [1, 1, 1, 0, 0]]
    assert not batch["input_ids"][1, 3:].any()


def test_data_collator_for_token_classification(tokenizer):
    features = []
    for words, tags in [(["a", "b", "c"], [1, 2, 3]), (["d"], [4])]:
        encoded = tokenizer(words, is_split_into_words=True)
        labels = [-100 if index is None else tags[index] for index in encoded.word_ids()]
        features.append({**encoded, "labels": labels})
    batch = DataCollatorForTokenClassification(tokenizer)(features)
    assert batch["input_ids"].shape == (2, 5, 20)
    assert batch["labels"].tolist() == [[-100, 1, 2, 3, -100], [-100, 4, -100, -100, -100]]


def test_pad_accepts_tensors_and_single_sentences(tokenizer):
    single = tokenizer(["a"], is_split_into_words=True, return_tensors="pt")
    assert single["input_ids"].shape == (1, 3, 20)
    padded = tokenizer.pad({"input_ids": single["input_ids"][0]}, padding="max_length", max_length=5)
    assert padded["input_ids"].shape == (5, 20) and padded["attention_mask"].tolist() == [1, 1, 1, 0, 0]


def test_save_and_load(tmp_path):
    tokenizer = ElmoTokenizer(max_characters_per_token=30)
    tokenizer.save_pretrained(tmp_path)
    loaded = ElmoTokenizer.from_pretrained(tmp_path)
    words = [["Ünïcödé", "words"]]
    assert loaded.max_characters_per_token == 30
    assert (
        loaded(words, is_split_into_words=True)["input_ids"] == tokenizer(words, is_split_into_words=True)["input_ids"]
    )


@pytest.mark.parametrize(
    "text, kwargs, error, message",
    [
        ([], {}, ValueError, "the batch is empty"),
        ([["a"], []], {"is_split_into_words": True}, ValueError, "sentence 1 has no words"),
        (["ok", "  "], {}, ValueError, "sentence 1 has no words"),
        ([["a", 3]], {"is_split_into_words": True}, TypeError, "sentence 0, word 1 must be a string, got int"),
        (["fine", None], {}, TypeError, "sentence 1 must be a string, got NoneType"),
        (42, {}, TypeError, "text must be a string or a list of strings, got int"),
    ],
)
def test_bad_input_names_the_position(tokenizer, text, kwargs, error, message):
    with pytest.raises(error, match=message):
        tokenizer(text, **kwargs)


def test_char_ids_are_in_range(tokenizer):
    encoded = np.array(tokenizer([["x" * 100, "🙂", "\x00", "中文"]], is_split_into_words=True)["input_ids"])
    assert encoded.min() >= 1 and encoded.max() <= 261


def test_the_vocabulary_is_the_character_ids_the_model_embeds(tokenizer):
    vocab = tokenizer.get_vocab()
    assert len(tokenizer) == tokenizer.vocab_size == len(vocab) == ElmoConfig().num_characters == 262
    assert sorted(vocab.values()) == list(range(262))
    row = tokenizer.convert_tokens_to_ids("Hé")  # a word is a row of these ids
    assert row[:5] == [vocab["<bow_char>"], vocab["<0x48>"], vocab["<0xC3>"], vocab["<0xA9>"], vocab["<eow_char>"]]
    assert set(row[5:]) == {vocab["<pad_char>"]} and vocab["<no_char>"] == tokenizer.pad_token_id == 0
    assert tokenizer.convert_tokens_to_ids("<S>")[1] == vocab["<bos_char>"]
    assert tokenizer.convert_tokens_to_ids("</S>")[1] == vocab["<eos_char>"]


def test_pad_leaves_sentence_level_labels_alone(tokenizer):
    features = [
        {**tokenizer(words, is_split_into_words=True), "labels": label}
        for words, label in ((["a", "b", "c"], [1, 0]), (["d"], [0, 1]))
    ]
    batch = DataCollatorWithPadding(tokenizer)(features)
    assert batch["labels"].tolist() == [[1, 0], [0, 1]]  # e.g. multi-label targets: not padded to the words
    assert batch["input_ids"].shape == (2, 5, 20)


def test_trainer_copies_no_boundary_row_into_the_model_config():
    """transformers' Trainer copies a tokenizer's bos/eos/pad ids into the model config; ELMo's boundaries are rows of
    character ids, so the tokenizer gives None for them, and only the padding id (0) may be copied."""
    from transformers.trainer_utils import align_special_tokens

    from elmo_hf import ElmoForTokenClassification

    tokenizer = ElmoTokenizer()
    assert tokenizer.bos_token_id is None and tokenizer.eos_token_id is None
    assert tokenizer.convert_tokens_to_ids("</S>")[:3] == [259, 258, 260]  # the boundary itself is unchanged
    model = ElmoForTokenClassification(
        ElmoConfig(filters=[[1, 4]], lstm_dim=8, projection_dim=4, num_highway_layers=0, num_labels=2)
    )
    align_special_tokens(model, tokenizer)
    assert getattr(model.config, "eos_token_id", None) is None and getattr(model.config, "bos_token_id", None) is None


def test_ids_as_python_ints_and_as_tensors_are_bilm_tf_s_and_tensors_are_the_caller_s():
    """Rows of repeated words come from a cache of arrays: the ids stay bilm-tf's, lists hold Python ints, and
    writing into a returned tensor or array changes no later encoding."""
    tokenizer = ElmoTokenizer()
    sentences = [["the", "cat", "the"], ["émigré", "cat"]]
    expected = [[list(word_to_char_ids(word)) for word in ["<S>", *words, "</S>"]] for words in sentences]
    expected[1] += [[0] * 50]  # padding to the longer sentence
    as_lists = tokenizer(sentences, is_split_into_words=True, padding=True)["input_ids"]
    assert as_lists == expected and all(type(i) is int for row in as_lists[0] for i in row)
    for return_tensors in ("pt", "np"):
        ids = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors=return_tensors)["input_ids"]
        assert ids.dtype in (torch.int64, np.int64) and ids.tolist() == expected
        ids[:] = 7
    assert tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")["input_ids"].tolist() == (
        expected
    )


@pytest.mark.parametrize(
    "rows",
    [
        torch.tensor([[259, 105, 260], [259, 104, 260], [259, 105, 260], [0, 0, 0], [259, 104, 260]]),
        torch.tensor([[70000, 1], [3, 2], [70000, 1]]),  # ids past 16 bits: torch.unique's own path
        torch.tensor([[-1, 4], [2, 2], [-1, 4]]),  # negative ids too
        torch.zeros(0, 50, dtype=torch.long),
    ],
)
def test_distinct_rows_is_torch_unique(rows):
    """The words' distinct rows and their inverse, row for row and in the same order as torch.unique's (the
    character CNN encodes them in that order)."""
    distinct, inverse = distinct_rows(rows)
    expected, expected_inverse = torch.unique(rows, dim=0, return_inverse=True)
    assert torch.equal(distinct, expected) and torch.equal(inverse, expected_inverse)
    assert distinct.dtype == rows.dtype and inverse.dtype == torch.long


def test_distinct_rows_of_a_real_batch(tokenizer):
    """Numeric order, not byte order: ids above 255 (the markers) sort after the bytes, as in torch.unique."""
    words = "the cat saw the Zebra , 😀 and the cat ran".split()
    rows = tokenizer([words], is_split_into_words=True, return_tensors="pt")["input_ids"][0]
    generator = torch.Generator().manual_seed(0)
    rows = torch.cat([rows, torch.randint(0, 262, (200, rows.shape[1]), generator=generator)])
    distinct, inverse = distinct_rows(rows)
    expected, expected_inverse = torch.unique(rows, dim=0, return_inverse=True)
    assert torch.equal(distinct, expected) and torch.equal(inverse, expected_inverse)
