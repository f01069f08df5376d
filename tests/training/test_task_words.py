"""Task word embeddings (`elmo_hf/training/task_words.py`): the vocabulary, unknown words, word-vectors files, and a
head that saves, reloads and predicts the same through `from_pretrained` and the pipelines."""

from pathlib import Path

import pytest
import torch
from helpers import tiny_config
from transformers import pipeline

import elmo_hf
from elmo_hf import ElmoConfig, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoTokenizer
from elmo_hf.model.modeling_elmo import ElmoTaskWordEmbedding
from elmo_hf.training.task_words import TaskWordArguments, build_task_word_vocab, read_word_vectors
from elmo_hf.user_errors import UserInputError

SENTENCES = [["The", "film", "is", "good", "."], ["the", "film", "is", "bad", "."], ["A", "good", "cast", "."]]


def test_vocabulary_keeps_frequent_words_most_frequent_first():
    assert build_task_word_vocab(SENTENCES, min_count=2) == [".", "film", "good", "is", "the"]
    assert build_task_word_vocab(SENTENCES, min_count=2, lowercase=False) == [".", "film", "good", "is"]
    assert build_task_word_vocab(SENTENCES, min_count=1, max_size=2) == [".", "film"]


def test_unknown_words_padding_and_case_map_to_their_rows():
    tokenizer = ElmoTokenizer(max_characters_per_token=20)
    embedding = ElmoTaskWordEmbedding(["film", "good", "the"], dim=3)
    encoding = tokenizer(
        [["The", "FILM", "was", "good"], ["unseen"]], is_split_into_words=True, padding=True, return_tensors="pt"
    )
    ids = embedding.word_ids(encoding["input_ids"], encoding["attention_mask"].bool())
    # <S> The FILM was good </S> / <S> unseen </S> padding...: unknown words, boundaries and padding are row 0.
    assert ids.tolist() == [[0, 3, 1, 0, 2, 0], [0, 0, 0, 0, 0, 0]]
    assert embedding(encoding["input_ids"], encoding["attention_mask"].bool()).shape == (2, 6, 3)


def test_word_vectors_glove_and_word2vec_text(tmp_path):
    glove = tmp_path / "glove.txt"
    glove.write_text("the 0.1 0.2\nFilm 1 2\nfilm 3 4\nelse 5 6\n", encoding="utf-8")
    vectors = read_word_vectors(glove, words={"the", "film"})
    assert sorted(vectors) == ["film", "the"] and vectors["film"].tolist() == [1.0, 2.0]  # the first form wins
    word2vec = tmp_path / "w2v.txt"
    word2vec.write_text("2 2\nthe 0.5 0.5\ngood -1 1\n", encoding="utf-8")
    assert read_word_vectors(word2vec)["good"].tolist() == [-1.0, 1.0]
    embedding = ElmoTaskWordEmbedding(["film", "good", "the"], dim=2)
    assert embedding.load_vectors(read_word_vectors(glove)) == 2
    assert embedding.embedding.weight[1].tolist() == [1.0, 2.0]


def test_pretrained_vocab_gives_words_unseen_in_training_their_own_rows(tmp_path):
    config = ElmoConfig.from_pretrained(elmo_hf.DEFAULT_MODEL)
    glove = tmp_path / "glove.txt"
    glove.write_text("Superb 1 2\nthe 0.1 0.2\nsuperb 3 4\nfilm 5 6\n", encoding="utf-8")
    from_file = TaskWordArguments(task_word_min_count=2, task_word_vectors=str(glove), task_word_pretrained_vocab=True)
    # the training words first (as build_task_word_vocab orders them), then the file's new words, lowercased, once
    vocab = from_file.head_options(config, SENTENCES)["task_word_vocab"]
    assert vocab == [".", "film", "good", "is", "the", "superb"]
    without = TaskWordArguments(task_word_min_count=2, task_word_vectors=str(glove))
    assert without.head_options(config, SENTENCES)["task_word_vocab"] == [".", "film", "good", "is", "the"]
    from_bilm = TaskWordArguments(task_word_min_count=2, task_words_from_bilm=True, task_word_pretrained_vocab=True)
    vocab = from_bilm.head_options(config, SENTENCES, elmo_hf.DEFAULT_MODEL)["task_word_vocab"]
    softmax_words = (Path(elmo_hf.DEFAULT_MODEL) / "vocab.txt").read_text(encoding="utf-8").split()[3:]  # after <S> ...
    expected = dict.fromkeys([".", "film", "good", "is", "the"] + [word.lower() for word in softmax_words])
    assert vocab == list(expected) and "senate" in vocab and "Senate" not in vocab
    with pytest.raises(UserInputError, match="--task_word_pretrained_vocab: give --task_word_vectors"):
        TaskWordArguments(task_word_min_count=2, task_word_pretrained_vocab=True).head_options(config, SENTENCES)


@pytest.mark.parametrize("content, line", [("the 0.1 0.2\nfilm 1\n", 2), ("the 0.1 x\n", 1), ("2 2\nthe 1 nan\n", 2)])
def test_a_bad_word_vectors_line_is_one_error_naming_the_file_and_line(tmp_path, content, line):
    path = tmp_path / "vectors.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserInputError) as error:
        read_word_vectors(path)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{path}: line {line}: expected a word and 2 numbers")


@pytest.mark.parametrize("head_class", [ElmoForSequenceClassification, ElmoForTokenClassification])
def test_a_head_with_task_words_saves_loads_and_predicts_the_same(tmp_path, head_class):
    torch.manual_seed(0)
    config = tiny_config(num_labels=2, task_word_vocab=["film", "good", "the"], task_word_embedding_dim=5)
    model = head_class(config).eval()
    with torch.no_grad():
        model.task_encoder.task_words.embedding.weight.normal_(0.0, 3.0)  # words matter to the prediction
    tokenizer = ElmoTokenizer(max_characters_per_token=20)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = head_class.from_pretrained(tmp_path).eval()
    assert loaded.config.task_word_vocab == ["film", "good", "the"]
    encoding = tokenizer(["the film is good", "a film"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**encoding).logits
        torch.testing.assert_close(loaded(**encoding).logits, expected, rtol=0, atol=1e-6)
        other_word = tokenizer(["the film is bad", "a film"], padding=True, return_tensors="pt")
        assert not torch.equal(loaded(**other_word).logits[0], expected[0])  # "bad" is unknown, "good" is not
    if head_class is ElmoForSequenceClassification:
        classify = pipeline("text-classification", model=loaded, tokenizer=tokenizer, top_k=None)
        scores = {entry["label"]: entry["score"] for entry in classify(["the film is good"])[0]}
        probabilities = expected[0].softmax(-1)
        assert scores == {
            loaded.config.id2label[index]: pytest.approx(float(probabilities[index]), rel=1e-6) for index in range(2)
        }


def test_task_words_beside_precomputed_layers_need_input_ids():
    config = tiny_config(num_labels=2, task_word_vocab=["film"])
    model = ElmoForSequenceClassification(config).eval()
    tokenizer = ElmoTokenizer(max_characters_per_token=20)
    encoding = tokenizer(["the film"], return_tensors="pt")
    with torch.no_grad():
        layers = torch.stack(model.elmo(**encoding, output_hidden_states=True).hidden_states, dim=1)
        with pytest.raises(ValueError, match="input_ids is required with task word embeddings"):
            model(elmo_hidden_states=layers, attention_mask=encoding["attention_mask"])
        both = model(
            input_ids=encoding["input_ids"], elmo_hidden_states=layers, attention_mask=encoding["attention_mask"]
        ).logits
        torch.testing.assert_close(both, model(**encoding).logits)


def test_the_task_input_cannot_be_empty():
    with pytest.raises(ValueError, match="the task input x_k is empty"):
        tiny_config(use_input_elmo=False, use_bilm_token_layer=False)


def test_word_dropout_looks_words_up_as_unknown_only_while_training():
    tokenizer = ElmoTokenizer(max_characters_per_token=20)
    words = [f"w{index}" for index in range(50)]
    encoding = tokenizer([words * 40], is_split_into_words=True, return_tensors="pt")  # 2,000 known words
    ids, mask = encoding["input_ids"], encoding["attention_mask"].bool()
    embedding = ElmoTaskWordEmbedding(words, dim=2, word_dropout=0.25)
    with torch.no_grad():
        embedding.embedding.weight[0] = 0.0  # the unknown word's row
        embedding.embedding.weight[1:] = 1.0
    torch.manual_seed(0)
    unknown = (embedding(ids, mask)[0, 1:-1, 0] == 0).float().mean()  # boundaries left out
    assert 0.2 < unknown < 0.3
    embedding.eval()
    assert (embedding(ids, mask)[0, 1:-1] == 1.0).all()  # no dropout when predicting
    assert ElmoConfig(task_word_dropout=0.1).task_word_dropout == 0.1
    options = TaskWordArguments(task_word_min_count=1, task_word_dropout=0.1).head_options(tiny_config(), SENTENCES)
    assert options["task_word_dropout"] == 0.1  # the Trainer scripts' --task_word_dropout
    with pytest.raises(ValueError, match="task_word_dropout"):
        ElmoConfig(task_word_dropout=1.5)
