"""elmo_hf.inference.perplexity: both protocols equal a direct, independent loop over the targets."""

import json
import math

import pytest
import torch
from helpers import WORDS, load_script, tiny_lm

from elmo_hf import ElmoPreTrainingCollator, ElmoTokenizer, ElmoWordVocabulary
from elmo_hf.inference import perplexity

script = load_script("evaluate_perplexity")  # the thin command-line script

# An out-of-vocabulary word ("zebra"), a blank line (a sentence without words), sentences of varied length.
TEXT = "the cat sat on the mat .\na zebra ran\n\ndog sat\nthe dog ran on a mat .\ncat\n"


@pytest.fixture(scope="module")
def lm():
    return tiny_lm(seed=3)


@pytest.fixture(scope="module")
def lm_tokenizer():
    return ElmoTokenizer(max_characters_per_token=20)


@pytest.fixture(scope="module")
def vocabulary():
    return ElmoWordVocabulary(WORDS)


@pytest.fixture
def sentences(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return perplexity.read_sentences(path)


def _perplexities(forward_losses, backward_losses):
    forward = sum(forward_losses) / len(forward_losses)
    backward = sum(backward_losses) / len(backward_losses)
    return math.exp(forward), math.exp(backward), math.exp((forward + backward) / 2), len(forward_losses)


def reference_bilm_tf(model, tokenizer, vocabulary, sentences, batch_size):
    """bilm-tf's test loop written out: two streams (forward sentences, reversed sentences), rows refilled from
    the stream when their sentence is done, ONE word per row per step, states carried, an unfillable step
    dropped."""
    streams = [
        iter([["<S>", *words, "</S>"] for words in sentences]),
        iter([["</S>", *reversed(words), "<S>"] for words in sentences]),
    ]
    current = [[None] * batch_size, [None] * batch_size]
    states = [None, None]
    losses = [[], []]
    projection = model.config.projection_dim
    while True:
        step = [[], []]
        for direction in (0, 1):
            for row in range(batch_size):
                if current[direction][row] is None or len(current[direction][row]) <= 1:
                    current[direction][row] = next(streams[direction], None)
                    if current[direction][row] is None:
                        return _perplexities(*losses)
                step[direction].append(current[direction][row][:2])  # (input word, target word)
                current[direction][row] = current[direction][row][1:]
        for direction in (0, 1):
            input_ids = torch.tensor([[tokenizer.convert_tokens_to_ids(word)] for word, _ in step[direction]])
            with torch.no_grad():
                output = model.elmo(input_ids, lstm_states=states[direction])
                top = output.last_hidden_state[:, 0, direction * projection : (direction + 1) * projection]
                log_probs = model.lm_head(top).log_softmax(-1)  # (batch, V)
            states[direction] = output.lstm_states
            for row, (_, target) in enumerate(step[direction]):
                losses[direction].append(-float(log_probs[row, vocabulary.word_to_id(target)]))


def reference_stateless(model, tokenizer, vocabulary, sentences):
    losses = [[], []]
    for words in sentences:
        words = ["<S>", *words, "</S>"]
        input_ids = torch.tensor([tokenizer.convert_tokens_to_ids(words)])
        with torch.no_grad():
            output = model(input_ids, return_logits=True)
        forward, backward = output.forward_logits[0].log_softmax(-1), output.backward_logits[0].log_softmax(-1)
        for position in range(len(words) - 1):
            losses[0].append(-float(forward[position, vocabulary.word_to_id(words[position + 1])]))
            losses[1].append(-float(backward[position + 1, vocabulary.word_to_id(words[position])]))
    return _perplexities(*losses)


def _as_tuple(result):
    return (
        result["forward_perplexity"],
        result["backward_perplexity"],
        result["perplexity"],
        result["targets_per_direction"],
    )


@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_bilm_tf_protocol_equals_the_step_by_step_loop(lm, lm_tokenizer, vocabulary, sentences, batch_size):
    result = perplexity.evaluate_perplexity(lm, lm_tokenizer, vocabulary, sentences, "bilm-tf", batch_size)
    expected = reference_bilm_tf(lm, lm_tokenizer, vocabulary, sentences, batch_size)
    assert result["protocol"] == "bilm-tf"
    assert _as_tuple(result)[3] == expected[3]
    assert _as_tuple(result)[:3] == pytest.approx(expected[:3], rel=1e-5)
    assert result["perplexity"] == pytest.approx(
        math.sqrt(result["forward_perplexity"] * result["backward_perplexity"]), rel=1e-12
    )


def test_bilm_tf_protocol_drops_the_unfillable_end(lm, lm_tokenizer, vocabulary, sentences):
    # 26 targets per direction in the text; with 4 rows bilm-tf stops after the last complete step.
    counts = [
        perplexity.evaluate_perplexity(lm, lm_tokenizer, vocabulary, sentences, "bilm-tf", n)["targets_per_direction"]
        for n in (1, 4)
    ]
    assert counts[0] == sum(len(words) + 1 for words in sentences) == 26
    assert counts[1] < 26 and counts[1] % 4 == 0


@pytest.mark.parametrize("batch_size", [1, 3])
def test_stateless_protocol_equals_the_per_sentence_loop(lm, lm_tokenizer, vocabulary, sentences, batch_size):
    result = perplexity.evaluate_perplexity(lm, lm_tokenizer, vocabulary, sentences, "stateless", batch_size)
    expected = reference_stateless(lm, lm_tokenizer, vocabulary, sentences)
    assert result["protocol"] == "stateless"
    assert _as_tuple(result) == pytest.approx(expected, rel=1e-5)


def test_stateless_protocol_agrees_with_the_model_loss(lm, lm_tokenizer, vocabulary, sentences):
    nonempty = [words for words in sentences if words]
    batch = ElmoPreTrainingCollator(lm_tokenizer, vocabulary)([" ".join(words) for words in nonempty])
    with torch.no_grad():
        output = lm(**batch)
    result = perplexity.evaluate_perplexity(lm, lm_tokenizer, vocabulary, nonempty, "stateless", 2)
    assert math.log(result["forward_perplexity"]) == pytest.approx(float(output.forward_loss), rel=1e-5)
    assert math.log(result["backward_perplexity"]) == pytest.approx(float(output.backward_loss), rel=1e-5)


def test_cli_prints_json(lm, lm_tokenizer, vocabulary, tmp_path, capsys):
    lm.save_pretrained(tmp_path / "model")
    lm_tokenizer.save_pretrained(tmp_path / "model")
    vocabulary.save_pretrained(tmp_path / "model")
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    script.main(
        [
            "--model",
            str(tmp_path / "model"),
            "--text",
            str(tmp_path / "text.txt"),
            "--json",
            "--protocol",
            "stateless",
            "--batch-size",
            "2",
        ]
    )
    printed = json.loads(capsys.readouterr().out)
    expected = reference_stateless(lm, lm_tokenizer, vocabulary, perplexity.read_sentences(tmp_path / "text.txt"))
    assert printed["protocol"] == "stateless"
    assert printed["perplexity"] == pytest.approx(expected[2], rel=1e-5)


@pytest.mark.parametrize("content", ["", "\n  \n"])
def test_a_text_without_words_is_an_error(tmp_path, content):
    path = tmp_path / "empty.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match="empty.txt: holds no words; perplexity needs at least one sentence"):
        perplexity.read_sentences(path)


def test_cli_reports_an_empty_text_without_a_traceback(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--model", str(tmp_path / "unused"), "--text", str(tmp_path / "empty.txt")])
    assert exit_info.value.code == 2
    expected = f"error: {tmp_path / 'empty.txt'}: holds no words; perplexity needs at least one sentence\n"
    assert capsys.readouterr().err == expected


def test_a_text_too_short_for_the_batch_is_an_error(lm, lm_tokenizer, vocabulary):
    with pytest.raises(ValueError, match="too short for --batch-size 3 under the bilm-tf protocol"):
        perplexity.evaluate_perplexity(lm, lm_tokenizer, vocabulary, [["the"], ["cat"]], "bilm-tf", 3)


def test_converted_checkpoint_on_its_training_corpus(fixtures_dir):
    from elmo_hf.convert.convert_bilm_tf import convert_tf_checkpoint

    checkpoint = fixtures_dir / "tiny_char_bilm_ckpt"
    model, tokenizer, _ = convert_tf_checkpoint(
        checkpoint / "model.ckpt-60", checkpoint / "options.json", checkpoint / "vocab.txt"
    )
    vocabulary = ElmoWordVocabulary.from_file(checkpoint / "vocab.txt")
    sentences = perplexity.read_sentences(fixtures_dir / "train_corpus" / "data.txt")
    # bilm-tf trained this checkpoint with 2 rows; 5 sentences, 134 words -> 139 targets, 110 in full batches.
    result = perplexity.evaluate_perplexity(model, tokenizer, vocabulary, sentences, "bilm-tf", 2)
    expected = reference_bilm_tf(model, tokenizer, vocabulary, sentences, 2)
    assert result["targets_per_direction"] == expected[3] == 110
    assert _as_tuple(result)[:3] == pytest.approx(expected[:3], rel=1e-5)
