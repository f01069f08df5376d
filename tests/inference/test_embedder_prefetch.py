"""The embedder's prefetching (`ElmoEmbedder.prefetch`): the next batches tokenized in a background thread give the
same vectors, bit for bit, in the same order, and an error in the thread reaches the caller."""

import numpy as np
import pytest
from helpers import SENTENCES, tiny_model

from elmo_hf import ElmoEmbedder
from elmo_hf.inference.embedder import _prefetched


def test_prefetch_gives_the_same_vectors():
    embedder = ElmoEmbedder(tiny_model())
    sentences = SENTENCES * 3
    embedder.prefetch = False
    expected = embedder.embed_sentences(sentences, batch_size=2)
    embedder.prefetch = True
    actual = embedder.embed_sentences(sentences, batch_size=2)
    assert len(actual) == len(expected)
    for array, expected_array in zip(actual, expected):
        assert np.array_equal(array, expected_array)


def test_prefetched_order_and_errors():
    assert list(_prefetched(range(5), lambda item: item * item, enabled=True)) == [(i, i * i) for i in range(5)]

    def prepare(item):
        if item == 3:
            raise ValueError("bad item 3")
        return item

    results = _prefetched(range(5), prepare, enabled=True)
    assert [next(results) for _ in range(3)] == [(0, 0), (1, 1), (2, 2)]
    with pytest.raises(ValueError, match="bad item 3"):
        next(results)
