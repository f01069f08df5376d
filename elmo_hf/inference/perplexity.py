"""Perplexity of an ELMo language model (`ElmoForPreTraining`, e.g. converted from a bilm-tf training checkpoint
or elmo_hf.DEFAULT_MODEL), as bilm-tf measures it or sentence by sentence. `elmo-hf perplexity` runs it.

The text has one sentence per line, words separated by whitespace (as bilm-tf reads it); a blank line is a
sentence without words. Each direction predicts n + 1 targets per sentence of n words: the forward LM predicts
w1 .. wn and `</S>`, the backward LM wn .. w1 and `<S>`. Words missing from the vocabulary are scored as `<UNK>`
(their input still uses their characters). The combined perplexity is exp of the mean of the two directions'
mean losses, i.e. sqrt(forward_perplexity * backward_perplexity).

Protocols:
    bilm-tf    bilm-tf's `test()`: the text is one stream; each of the N rows takes the next sentence whenever it
               has finished its current one, and carries its LSTM state across sentences without ever resetting
               it. The forward LSTM reads <S> w1 .. wn (never </S>), the backward one </S> wn .. w1 (never <S>),
               one word per row per step. The last steps, where some row finds no sentence left, are dropped,
               as bilm-tf drops a batch it cannot fill. Results depend on N.
    stateless  every sentence alone, from a zero state (what ElmoForPreTraining's loss computes); N only batches
               the computation.
"""

import math
import os
import sys
from collections.abc import Sequence

import torch
from tqdm import tqdm

from ..hub.shipped_models import shipped_model_path
from ..model.configuration_elmo import ElmoConfig
from ..model.modeling_elmo import ElmoForPreTraining
from ..model.tokenization_elmo import ElmoTokenizer
from ..training.word_vocabulary import ElmoWordVocabulary
from ..user_errors import UserInputError, unloadable_model_error, unreadable_file_error

PROTOCOLS = ("bilm-tf", "stateless")
# The LSTM state `(cell, hidden)`, each `(layers, 2, rows, lstm_dim)` (`ElmoModelOutput.lstm_states`).
LstmStates = tuple[torch.Tensor, ...]


def read_sentences(path: str | os.PathLike[str]) -> list[list[str]]:
    """One list of words per line (whitespace-split, as bilm-tf); errors on a text without any word."""
    try:
        with open(path, encoding="utf-8") as text:
            sentences = [line.split() for line in text]
    except (OSError, UnicodeDecodeError) as error:
        raise unreadable_file_error(path, error, "UTF-8 text, one sentence per line") from None
    if not any(sentences):
        raise UserInputError(f"{path}: holds no words; perplexity needs at least one sentence")
    return sentences


def bilm_tf_schedule(lengths: Sequence[int], batch_size: int) -> tuple[list[list[list[int]]], int]:
    """bilm-tf's assignment of sentences to rows: for every row, the `[sentence index, steps]` segments it reads,
    each sentence of n words giving n + 1 steps, cut to the number of complete batches (the same for every row)."""
    rows: list[list[list[int]]] = [[] for _ in range(batch_size)]
    remaining = [0] * batch_size
    next_sentence, complete_batches = 0, 0
    while True:
        for row in range(batch_size):
            if remaining[row] == 0:
                if next_sentence == len(lengths):
                    return [_first_steps(segments, complete_batches) for segments in rows], complete_batches
                rows[row].append([next_sentence, 0])
                remaining[row] = lengths[next_sentence] + 1
                next_sentence += 1
            remaining[row] -= 1
            rows[row][-1][1] += 1
        complete_batches += 1


def _first_steps(segments: list[list[int]], steps: int) -> list[list[int]]:
    kept: list[list[int]] = []
    for sentence, length in segments:
        if steps == 0:
            break
        kept.append([sentence, min(length, steps)])
        steps -= kept[-1][1]
    return kept


class _Totals:
    """Sums of negative log-likelihoods and target counts, per direction."""

    def __init__(self) -> None:
        self.loss = [0.0, 0.0]
        self.count = [0, 0]

    def add(self, direction: int, log_probs: torch.Tensor, targets: torch.Tensor) -> None:
        """log_probs (N, V) of the states predicting targets (N,)."""
        self.loss[direction] += float(-log_probs.gather(1, targets.unsqueeze(1)).sum())
        self.count[direction] += len(targets)

    def result(self, protocol: str) -> dict[str, str | float]:
        forward, backward = (self.loss[d] / self.count[d] for d in (0, 1))
        return {
            "protocol": protocol,
            "forward_perplexity": math.exp(forward),
            "backward_perplexity": math.exp(backward),
            "perplexity": math.exp((forward + backward) / 2),
            "targets_per_direction": self.count[0],
        }


def _char_id_batch(tokenizer: ElmoTokenizer, word_lists: Sequence[Sequence[str]]) -> torch.Tensor:
    """(batch, longest, max_characters_per_token) char ids of word lists (boundaries given as words), 0-padded."""
    longest = max(len(words) for words in word_lists)
    batch = torch.zeros(len(word_lists), longest, tokenizer.max_characters_per_token, dtype=torch.long)
    for row, words in enumerate(word_lists):
        if words:
            batch[row, : len(words)] = torch.tensor(tokenizer.convert_tokens_to_ids(words))
    return batch


def _direction_log_probs(
    model: ElmoForPreTraining, input_ids: torch.Tensor, lstm_states: LstmStates | None, direction: int
) -> tuple[torch.Tensor, LstmStates]:
    """Log-probabilities (batch, words, V) of one direction's top states, and the LSTM states after the call."""
    output = model.elmo(input_ids, lstm_states=lstm_states)
    states = output.last_hidden_state.split(model.config.projection_dim, dim=-1)[direction]  # (batch, words, proj)
    return model.lm_head(states).log_softmax(-1), output.lstm_states


def evaluate_bilm_tf(
    model: ElmoForPreTraining,
    tokenizer: ElmoTokenizer,
    vocabulary: ElmoWordVocabulary,
    sentences: Sequence[Sequence[str]],
    batch_size: int,
    progress: tqdm | None = None,
) -> dict[str, str | float]:
    """bilm-tf's stateful streaming protocol (see the module docstring)."""
    schedule, batches = bilm_tf_schedule([len(words) for words in sentences], batch_size)
    if batches == 0:
        raise UserInputError(
            f"--batch-size: the text is too short for --batch-size {batch_size} under the bilm-tf protocol: no batch "
            f"of {batch_size} rows can be filled (use a smaller --batch-size or --protocol stateless)"
        )
    if progress is not None:
        progress.total = batches * batch_size  # the targets of the complete batches
    totals = _Totals()
    states: LstmStates | None = None
    for round_index in range(max(len(segments) for segments in schedule)):
        forward_inputs: list[list[str]] = []
        forward_targets: list[list[str]] = []
        backward_inputs: list[list[str]] = []
        backward_targets: list[list[str]] = []
        for segments in schedule:
            if round_index >= len(segments):
                for row_words in (forward_inputs, forward_targets, backward_inputs, backward_targets):
                    row_words.append([])
                continue
            sentence, steps = segments[round_index]
            words = ["<S>", *sentences[sentence], "</S>"]
            first = len(words) - 1 - steps
            # Forward reads the first `steps` words and predicts the word after each.
            forward_inputs.append(words[:steps])
            forward_targets.append(words[1 : steps + 1])
            # Backward reads the last `steps` words (from </S> leftwards) and predicts the word before each.
            backward_inputs.append(words[first + 1 :])
            backward_targets.append(words[first:-1])
        next_states: list[LstmStates] = []
        for direction, inputs, targets in (
            (0, forward_inputs, forward_targets),
            (1, backward_inputs, backward_targets),
        ):
            log_probs, call_states = _direction_log_probs(model, _char_id_batch(tokenizer, inputs), states, direction)
            next_states.append(call_states)
            for row, row_targets in enumerate(targets):
                if row_targets:
                    ids = torch.tensor([vocabulary.word_to_id(word) for word in row_targets])
                    totals.add(direction, log_probs[row, : len(ids)], ids)
        # Each direction's state comes from the call that fed that direction its own stream.
        states = tuple(
            torch.stack([forward_state[:, 0], backward_state[:, 1]], dim=1)  # (layers, 2, batch, dim)
            for forward_state, backward_state in zip(*next_states)
        )
        if progress is not None:
            progress.update(sum(len(targets) for targets in forward_targets))
    return totals.result("bilm-tf")


def evaluate_stateless(
    model: ElmoForPreTraining,
    tokenizer: ElmoTokenizer,
    vocabulary: ElmoWordVocabulary,
    sentences: Sequence[Sequence[str]],
    batch_size: int,
    progress: tqdm | None = None,
) -> dict[str, str | float]:
    """Every sentence alone from a zero state; batches of `batch_size` sentences."""
    totals = _Totals()
    for start in range(0, len(sentences), batch_size):
        chunk = [["<S>", *words, "</S>"] for words in sentences[start : start + batch_size]]
        input_ids = _char_id_batch(tokenizer, chunk)
        forward_log_probs, _ = _direction_log_probs(model, input_ids, None, 0)
        backward_log_probs, _ = _direction_log_probs(model, input_ids, None, 1)
        for row, words in enumerate(chunk):
            ids = torch.tensor([vocabulary.word_to_id(word) for word in words])
            totals.add(0, forward_log_probs[row, : len(ids) - 1], ids[1:])
            totals.add(1, backward_log_probs[row, 1 : len(ids)], ids[:-1])
        if progress is not None:
            progress.update(sum(len(words) - 1 for words in chunk))
    return totals.result("stateless")


def evaluate_perplexity(
    model: ElmoForPreTraining,
    tokenizer: ElmoTokenizer,
    vocabulary: ElmoWordVocabulary,
    sentences: Sequence[Sequence[str]],
    protocol: str = "bilm-tf",
    batch_size: int = 1,
    show_progress: bool = False,
) -> dict[str, str | float]:
    """{"protocol", "forward_perplexity", "backward_perplexity", "perplexity", "targets_per_direction"}: the
    characters of `sentences` (lists of words) from `tokenizer`, their targets from `vocabulary`
    ([`ElmoWordVocabulary`])."""
    if protocol not in PROTOCOLS:
        raise UserInputError(f"--protocol: protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserInputError(f"--batch-size: batch_size must be a positive int, got {batch_size!r}")
    evaluate = evaluate_bilm_tf if protocol == "bilm-tf" else evaluate_stateless
    with (
        torch.no_grad(),
        tqdm(
            total=sum(len(words) + 1 for words in sentences),
            unit="tok",
            desc=f"perplexity ({protocol})",
            disable=not show_progress,
            file=sys.stderr,
        ) as progress,
    ):
        return evaluate(model.eval(), tokenizer, vocabulary, sentences, batch_size, progress)


def load_language_model(
    model_dir: str | os.PathLike[str],
) -> tuple[ElmoForPreTraining, ElmoTokenizer, ElmoWordVocabulary]:
    """(ElmoForPreTraining, its tokenizer, its word vocabulary) from a checkpoint folder, Hub name or shipped model's
    name (`elmo_hf.SHIPPED_MODELS`)."""
    model_dir = shipped_model_path(model_dir)
    try:
        config = ElmoConfig.from_pretrained(model_dir)
        tokenizer = ElmoTokenizer.from_pretrained(model_dir)
        model = ElmoForPreTraining.from_pretrained(model_dir) if config.vocab_size else None
    except (OSError, ValueError) as error:  # no such model, unreadable or contradictory files
        raise unloadable_model_error(model_dir, error) from None
    if model is None:
        raise UserInputError(
            f"{model_dir}: has no softmax (vocab_size 0); perplexity needs a language model, e.g. one converted "
            "with --tf-checkpoint from a bilm-tf training checkpoint"
        )
    # A missing vocab.txt is its own one-line error, naming the folder.
    return model, tokenizer, ElmoWordVocabulary.from_pretrained(model_dir)
