"""bilm-tf's stateful mode when the batch size changes from one call to the next.

bilm-tf keeps its LSTM state in variables sized for the largest batch: a batch of B rows reads and writes rows
0..B-1 only, and the other rows keep their state for later batches (allennlp's `_EncoderBase` does the same, and
starts rows beyond the stored state from zeros).
"""

import json

import numpy as np
import pytest
import torch
from helpers import tiny_model

from elmo_hf.convert.convert_bilm_tf import convert_hdf5

# Rows of each consecutive batch: 4, then 2 (rows 2 and 3 wait), then 4 again.
BATCH_ROWS = [4, 2, 4]


def run(model, tokenizer, sentences, lstm_states=None):
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch, output_hidden_states=True, lstm_states=lstm_states)
    return torch.stack(output.hidden_states, dim=1), batch["attention_mask"].bool(), output.lstm_states


def test_streaming_through_batches_of_4_2_4_rows_equals_each_row_alone(fixtures_dir):
    folder = fixtures_dir / "allennlp_elmo"
    model, tokenizer, _ = convert_hdf5(folder / "options.json", folder / "lm_weights.hdf5")
    corpus = [sentence.split() for sentence in json.loads((folder / "sentences.json").read_text())[0]]
    assert len(corpus) >= sum(BATCH_ROWS)

    # Batch b holds the next BATCH_ROWS[b] sentences; row r of every batch continues the state of row r.
    sentences_of_row = {row: [] for row in range(max(BATCH_ROWS))}
    batched_outputs = {row: [] for row in sentences_of_row}  # row -> [(layers, words, dim) of each of its sentences]
    states, used = None, 0
    for rows in BATCH_ROWS:
        sentences = corpus[used : used + rows]
        used += rows
        layers, mask, new_states = run(model, tokenizer, sentences, states)  # layers: (rows, layers, words, dim)
        assert new_states[0].shape[2] == max(BATCH_ROWS)  # the state keeps a row for every slot seen
        if states is not None and rows < states[0].shape[2]:
            # Rows past the batch are carried through bit for bit.
            for before, after in zip(states, new_states):
                assert torch.equal(after[:, :, rows:], before[:, :, rows:])
        states = new_states
        for row, sentence in enumerate(sentences):
            sentences_of_row[row].append(sentence)
            batched_outputs[row].append(layers[row][:, mask[row]])

    for row, sentences in sentences_of_row.items():
        row_states = None
        for index, sentence in enumerate(sentences):
            alone, _, row_states = run(model, tokenizer, [sentence], row_states)  # (1, layers, words, dim)
            ours = batched_outputs[row][index].numpy()
            expected = alone[0].numpy()
            difference = np.abs(ours - expected).max()
            assert np.allclose(ours, expected, atol=1e-6), (
                f"row {row}, sentence {index}: max difference {difference:.3g}"
            )


def test_a_larger_batch_starts_its_new_rows_from_zero(tokenizer):
    model = tiny_model()
    first = [["A", "first", "sentence"], ["Two"]]
    second = [["It", "goes", "on"], ["and", "on"], ["New", "row"], ["Another", "new", "one", "."]]
    _, _, states = run(model, tokenizer, first)
    carried, _, after = run(model, tokenizer, second, states)  # (rows, layers, words, dim)
    fresh, _, _ = run(model, tokenizer, second)
    assert after[0].shape[2] == 4
    # New rows equal a call without state; continued rows do not.
    assert torch.allclose(carried[2:], fresh[2:], atol=1e-6)
    assert not torch.allclose(carried[:2, 1:], fresh[:2, 1:], atol=1e-3)  # the LSTM layers of the continued rows


@pytest.mark.parametrize("layers, dim", [(1, 16), (2, 15)])
def test_states_of_another_shape_are_still_rejected(tokenizer, layers, dim):
    model = tiny_model()
    cell = torch.zeros(layers, 2, 3, dim)
    hidden = torch.zeros(layers, 2, 3, 8)
    with pytest.raises(ValueError, match=r"lstm_states must have shapes \(2, 2, 3, 16\) and \(2, 2, 3, 8\)"):
        run(model, tokenizer, [["Hi"]], (cell, hidden))
