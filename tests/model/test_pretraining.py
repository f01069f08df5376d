"""ElmoForPreTraining: the shared softmax, the shifted targets, the sampled softmax, the word vocabulary."""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from helpers import WORDS, tiny_config, tiny_lm
from transformers import AutoModelForPreTraining

from elmo_hf import ElmoConfig, ElmoForPreTraining, ElmoPreTrainingCollator, ElmoTokenizer, ElmoWordVocabulary
from elmo_hf.model.modeling_elmo import ElmoLogUniformSampler, elmo_sampled_softmax_loss


@pytest.fixture
def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(WORDS) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def vocabulary(vocab_file):
    return ElmoWordVocabulary.from_file(vocab_file)


@pytest.fixture
def lm_batch(vocabulary):
    """Batches lists of words as run_bilm_pretraining.py does: input_ids, attention_mask and labels, padded."""
    collator = ElmoPreTrainingCollator(ElmoTokenizer(max_characters_per_token=20), vocabulary)
    return lambda sentences: collator([" ".join(words) for words in sentences])


SENTENCES = [["the", "cat", "sat", "on", "the", "mat", "."], ["a", "zebra", "ran"]]


def test_loss_is_the_mean_of_both_directions_over_shifted_targets(lm_batch, vocabulary):
    model = tiny_lm()
    batch = lm_batch(SENTENCES)
    output = model(**batch, return_logits=True)
    log_probs_forward = output.forward_logits.log_softmax(-1)
    log_probs_backward = output.backward_logits.log_softmax(-1)
    forward_terms, backward_terms = [], []
    for row, sentence in enumerate(SENTENCES):
        ids = [vocabulary.word_to_id(word) for word in ["<S>", *sentence, "</S>"]]
        for position in range(len(ids) - 1):
            forward_terms.append(-log_probs_forward[row, position, ids[position + 1]])
            backward_terms.append(-log_probs_backward[row, position + 1, ids[position]])
    forward, backward = torch.stack(forward_terms).mean(), torch.stack(backward_terms).mean()
    assert torch.allclose(output.forward_loss, forward) and torch.allclose(output.backward_loss, backward)
    assert torch.allclose(output.loss, (forward + backward) / 2)
    assert output.forward_logits.shape == (2, 9, len(WORDS))


def test_logits_come_from_the_top_layer_halves():
    model = tiny_lm()
    ids = torch.randint(1, 262, (2, 4, 20))
    output = model(ids, return_logits=True)
    top = model.elmo(ids).last_hidden_state
    assert torch.allclose(output.forward_logits, model.lm_head(top[..., :8]))
    assert torch.allclose(output.backward_logits, model.lm_head(top[..., 8:]))
    assert output.loss is None and model(ids).forward_logits is None


def test_padding_does_not_change_the_loss(lm_batch):
    model = tiny_lm()
    alone = lm_batch([SENTENCES[1]])
    padded = lm_batch(SENTENCES[::-1])
    assert padded["labels"][0, -1] == -100
    single = model(**alone)
    both = model(**{key: value[:1] for key, value in padded.items()})
    assert torch.allclose(single.loss, both.loss, atol=1e-6)


def test_pretraining_dropout_applies_only_to_the_lm_in_training_mode(lm_batch):
    batch = lm_batch(SENTENCES)
    plain = tiny_lm(num_sampled_negatives=0)
    dropped = tiny_lm(num_sampled_negatives=0, pretraining_dropout=0.5)
    # Evaluation and embedding never drop anything.
    assert torch.equal(dropped(**batch).loss, plain(**batch).loss)
    dropped.train()
    embedded = dropped.elmo(batch["input_ids"]).last_hidden_state
    assert torch.equal(embedded, plain.elmo(batch["input_ids"]).last_hidden_state)
    # Training drops each LSTM layer's input and the softmax input, in that order of random draws.
    torch.manual_seed(3)
    loss = dropped(**batch).loss
    torch.manual_seed(3)
    top = plain.elmo(batch["input_ids"], batch["attention_mask"], lstm_dropout=0.5).last_hidden_state
    top = F.dropout(top, 0.5, training=True)  # (batch, W, 2 * projection_dim)
    forward_states, backward_states = top.split(8, dim=-1)  # each (batch, W, projection_dim)
    labels, words = batch["labels"], batch["attention_mask"].bool()
    backward_labels = labels[:, :-1].masked_fill(~words[:, 1:], -100)  # a padded state predicts nothing
    forward = F.cross_entropy(plain.lm_head(forward_states[:, :-1]).flatten(0, 1), labels[:, 1:].flatten())
    backward = F.cross_entropy(plain.lm_head(backward_states[:, 1:]).flatten(0, 1), backward_labels.flatten())
    assert torch.allclose(loss, (forward + backward) / 2, atol=1e-6)
    assert not torch.allclose(loss, plain(**batch).loss, atol=1e-3)
    torch.manual_seed(3)
    assert torch.equal(dropped(**batch).loss, loss)


def test_bad_labels_are_rejected():
    model = tiny_lm()
    ids = torch.randint(1, 262, (1, 3, 20))
    with pytest.raises(ValueError, match=r"labels must be word ids in \[0, 12\) or -100, got 12"):
        model(ids, labels=torch.tensor([[0, 12, 1]]))
    with pytest.raises(ValueError, match=r"labels must have shape \(1, 3\) \(batch, words\), got \(1, 2\)"):
        model(ids, labels=torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match="labels hold no target: every word to predict is -100"):
        model(ids, labels=torch.full((1, 3), -100))


def test_config_checks_the_softmax_fields():
    with pytest.raises(ValueError, match="num_sampled_negatives must be at most vocab_size \\(10\\)"):
        ElmoConfig(vocab_size=10, num_sampled_negatives=11)
    with pytest.raises(ValueError, match="ElmoForPreTraining needs config.vocab_size > 0"):
        ElmoForPreTraining(tiny_config())
    assert ElmoConfig().vocab_size == 0 and ElmoConfig().num_sampled_negatives == 8192


def test_save_and_reload_through_the_auto_class(tmp_path):
    model = tiny_lm()
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForPreTraining.from_pretrained(tmp_path)
    assert type(reloaded) is ElmoForPreTraining
    ids = torch.randint(1, 262, (1, 4, 20))
    labels = torch.tensor([[0, 3, 5, 1]])
    assert torch.equal(reloaded.eval()(ids, labels=labels).loss, model(ids, labels=labels).loss)


# ---- sampled softmax ----


def test_log_uniform_sampler_probabilities_and_unique_draws():
    sampler = ElmoLogUniformSampler(1000)
    assert math.isclose(float(sampler.log_probabilities.exp().sum()), 1.0, rel_tol=1e-12)
    assert math.isclose(float(sampler.log_probabilities[0].exp()), math.log(2) / math.log(1001), rel_tol=1e-12)
    sampled, tries = sampler.sample(50, generator=torch.Generator().manual_seed(0))
    assert len(set(sampled.tolist())) == 50 and tries >= 50
    # TF's expected count for unique sampling: 1 - (1 - p) ** tries.
    p = math.log(2) / math.log(1001)
    assert math.isclose(float(sampler.log_expected_counts(torch.tensor([0]), tries)), math.log(1 - (1 - p) ** tries))


def test_sampled_softmax_with_every_class_sampled_equals_the_full_softmax():
    model = tiny_lm(num_sampled_negatives=len(WORDS)).train()
    ids = torch.randint(1, 262, (2, 6, 20))
    labels = torch.randint(0, len(WORDS), (2, 6))
    sampled_loss = model(ids, labels=labels).loss
    full_loss = model.eval()(ids, labels=labels).loss
    assert torch.allclose(sampled_loss, full_loss, atol=1e-6)


def test_accidental_hits_are_removed():
    hidden, weight, bias = torch.randn(3, 4), torch.randn(6, 4), torch.randn(6)
    targets, sampled = torch.tensor([1, 2, 5]), torch.tensor([1, 3])
    zeros = torch.zeros(3), torch.zeros(2)
    loss = elmo_sampled_softmax_loss(hidden, targets, weight, bias, sampled, *zeros)
    logits = hidden @ weight.T + bias
    expected = torch.stack(
        [
            F.cross_entropy(logits[0, [1, 3]], torch.tensor(0)),  # the sampled 1 is row 0's target: removed
            F.cross_entropy(logits[1, [2, 1, 3]], torch.tensor(0)),
            F.cross_entropy(logits[2, [5, 1, 3]], torch.tensor(0)),
        ]
    ).mean()
    assert torch.allclose(loss, expected)


def test_sampled_softmax_gradient_matches_the_full_gradient_in_expectation():
    # Toy case: the logits are the softmax bias of 40 classes (zero states), Zipf-shaped like a real LM's, target 3,
    # 30 log-uniform negatives. The mean of 2000 sampled-softmax gradients (seed 0) is compared with the full
    # softmax gradient; tolerance 0.02 relative (L2). Measured: 0.004 with the log-expected-count correction,
    # 0.033 without it. Sampled softmax is consistent rather than exactly unbiased: its bias shrinks as the
    # number of negatives grows (with 10 negatives and other logits: 0.04-0.06, the same at 4000 and 16000 draws).
    generator = torch.Generator().manual_seed(0)
    vocab, num_sampled, draws = 40, 30, 2000
    sampler = ElmoLogUniformSampler(vocab)
    logits = sampler.log_probabilities.float()
    hidden, weight, target = torch.zeros(1, 1), torch.zeros(vocab, 1), torch.tensor([3])
    full = torch.softmax(logits, 0) - F.one_hot(target[0], vocab)

    def mean_sampled_gradient(corrected):
        total = torch.zeros(vocab)
        for _ in range(draws):
            sampled, tries = sampler.sample(num_sampled, generator=generator)
            log_expected = sampler.log_expected_counts(torch.cat([target, sampled]), tries).float() * corrected
            bias = logits.clone().requires_grad_()
            elmo_sampled_softmax_loss(
                hidden, target, weight, bias, sampled, log_expected[:1], log_expected[1:]
            ).backward()
            total += bias.grad
        return total / draws

    assert float((mean_sampled_gradient(True) - full).norm() / full.norm()) < 0.02
    assert float((mean_sampled_gradient(False) - full).norm() / full.norm()) > 0.02


# ---- word vocabulary ----


def test_word_labels_map_unknown_words_to_unk_but_keep_their_characters(lm_batch):
    batch = lm_batch([["the", "zebra"]])
    assert batch["labels"].tolist() == [[0, 3, 2, 1]]
    plain = ElmoTokenizer(max_characters_per_token=20)([["the", "zebra"]], is_split_into_words=True)
    assert batch["input_ids"].tolist() == plain["input_ids"]


def test_collator_pads_labels_with_minus_100_and_truncates_words_and_labels_together(vocabulary):
    tokenizer = ElmoTokenizer(max_characters_per_token=20)
    batch = ElmoPreTrainingCollator(tokenizer, vocabulary)(["the cat sat on the mat .", "a zebra ran"])
    assert batch["labels"].tolist()[1] == [0, 4, 2, 8, 1, -100, -100, -100, -100]
    assert batch["attention_mask"].tolist()[1] == [1] * 5 + [0] * 4
    # max_words_per_sentence counts the boundaries; raw text (tokenize=True) has its punctuation split off.
    truncated = ElmoPreTrainingCollator(tokenizer, vocabulary, tokenize=True, max_words_per_sentence=4)(["the mat."])
    assert truncated["labels"].tolist() == [[0, 3, 11, 1]]
    assert truncated["input_ids"].tolist() == [tokenizer.convert_tokens_to_ids(["<S>", "the", "mat", "</S>"])]


def test_vocabulary_round_trip_and_tokenizer_pad_of_word_labels(vocabulary, tmp_path):
    assert vocabulary.save_pretrained(tmp_path / "saved") == str(tmp_path / "saved" / "vocab.txt")
    assert (tmp_path / "saved" / "vocab.txt").read_text(encoding="utf-8").splitlines() == WORDS
    assert ElmoWordVocabulary.from_pretrained(tmp_path / "saved").words == WORDS and len(vocabulary) == len(WORDS)
    tokenizer = ElmoTokenizer(max_characters_per_token=20)
    examples = [
        {**tokenizer(words, is_split_into_words=True), "labels": vocabulary.sentence_labels(words)}
        for words in SENTENCES
    ]
    padded = tokenizer.pad(examples, return_tensors="pt")
    assert padded["labels"].tolist()[1] == [0, 4, 2, 8, 1, -100, -100, -100, -100]


def test_vocab_must_start_with_the_boundaries_and_unk_and_hold_each_word_once(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("the\n<S>\n</S>\n<UNK>\n", encoding="utf-8")
    expected = (
        "vocab.txt: a bilm-tf vocabulary must start with <S>, </S>, <UNK> (one per line), got ['the', '<S>', '</S>']"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        ElmoWordVocabulary.from_file(path)
    path.write_text("<S>\n</S>\n<UNK>\nthe\ncat\nthe\n", encoding="utf-8")
    with pytest.raises(ValueError, match="vocab.txt: word 'the' appears twice \\(again on line 6\\)"):
        ElmoWordVocabulary.from_file(path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'empty'}: no vocab.txt, the word vocabulary")):
        ElmoWordVocabulary.from_pretrained(tmp_path / "empty")


def test_the_tokenizer_has_no_word_vocabulary(vocab_file):
    with pytest.raises(ValueError, match="ElmoTokenizer has no word vocabulary \\(vocab_file\\): load the language"):
        ElmoTokenizer(vocab_file=str(vocab_file))
