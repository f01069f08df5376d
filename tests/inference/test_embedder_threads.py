"""Two ElmoEmbedders on one model, one with a token cache and one without, embedding at once from two threads: the
cache is an argument of each call, so neither thread sees the other's."""

import copy
import threading

import numpy as np
import torch
from helpers import tiny_model

from elmo_hf import ElmoEmbedder, ElmoTokenCache

SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], ["Hello"], ["a", "b", "c"], ["ELMo", "is", "here"]]
CALLS_PER_THREAD = 25


def test_two_threads_with_and_without_a_cache_get_their_own_vectors():
    model = tiny_model(seed=12)
    plain, cached = ElmoEmbedder(model), ElmoEmbedder(model)
    # The cache is built from a changed copy of the encoder, so a call that used the wrong one would show.
    changed_encoder = copy.deepcopy(model.character_encoder)
    with torch.no_grad():
        changed_encoder.char_embedding.mul_(-1.5)
    words = [cached.tokenizer.bos_token, cached.tokenizer.eos_token, *{word for s in SENTENCES for word in s}]
    cached.token_cache = ElmoTokenCache(changed_encoder, torch.tensor(cached.tokenizer.convert_tokens_to_ids(words)))
    expected = {"plain": plain.embed_sentences(SENTENCES), "cached": cached.embed_sentences(SENTENCES)}
    assert not np.allclose(expected["plain"][0], expected["cached"][0], atol=1e-2)

    start = threading.Barrier(2)
    results = {"plain": [], "cached": []}
    errors = []

    def embed(name, embedder):
        try:
            start.wait()
            for _ in range(CALLS_PER_THREAD):
                results[name].append(embedder.embed_sentences(SENTENCES, batch_size=2))
        except Exception as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=embed, args=item) for item in (("plain", plain), ("cached", cached))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for name in ("plain", "cached"):
        assert len(results[name]) == CALLS_PER_THREAD
        for arrays in results[name]:
            for array, reference in zip(arrays, expected[name]):
                np.testing.assert_allclose(array, reference, rtol=0, atol=1e-6)
    assert model.character_encoder is plain.model.character_encoder and not isinstance(
        model.character_encoder, ElmoTokenCache
    )
