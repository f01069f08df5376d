"""The adapters in elmo_hf.integrations: sentence-transformers, spaCy and TensorFlow Hub's ELMo outputs, each on a
tiny random model. A library that is not installed skips its tests (a failure when CI is set)."""

import importlib
import importlib.metadata
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import tiny_model

from elmo_hf import ElmoEmbedder

SENTENCES = [
    "The cat sat on the mat .",
    "Dogs bark .",
    "A rather longer sentence , with a comma and several words in it .",
    "Ünïcödé wörds too",
]
RAW_SENTENCES = ["The U.S. Centers don't close.", "It wasn 't the most seaworthy of prizes ."]


def require(module):
    """Import `module`, or skip (fail under CI) when its extra is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        message = f"{module} is not installed ({error}); install the matching elmo-hf extra"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI installs every extra")
        pytest.skip(message)


def embedder_sentence_vectors(model, sentences, split=str.split):
    """ElmoEmbedder's sentence vectors of `sentences` split into words by `split`: (sentences, dim)."""
    vectors = ElmoEmbedder(model).embed_sentences(
        [split(sentence) for sentence in sentences], layers="average", sentence_vectors=True
    )
    return np.stack(vectors)


# ---- sentence-transformers ----


def test_sentence_transformers_encode_equals_embedder_sentence_vectors(tmp_path, one_thread):
    require("sentence_transformers")
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    from elmo_hf.integrations.sentence_transformers import ElmoSentenceTransformerModule

    model = tiny_model(seed=3)
    expected = embedder_sentence_vectors(model, SENTENCES)
    elmo = ElmoSentenceTransformerModule(model)
    assert elmo.get_embedding_dimension() == 16
    encoder = SentenceTransformer(modules=[elmo, Pooling(elmo.get_embedding_dimension(), "mean")], device="cpu")
    # batch_size 3: one batch of three sentences of different lengths, then one alone.
    vectors = encoder.encode(SENTENCES, batch_size=3, show_progress_bar=True)
    assert vectors.shape == (4, 16)
    np.testing.assert_allclose(vectors, expected, atol=1e-6, rtol=0)

    # save / load round trip: the folder holds the biLM and the settings; reloading gives the same vectors.
    encoder.save(str(tmp_path / "st"))
    assert (tmp_path / "st" / "model.safetensors").is_file()
    assert (tmp_path / "st" / "elmo_sentence_transformer.json").is_file()
    reloaded = SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=True)
    np.testing.assert_allclose(reloaded.encode(SENTENCES, batch_size=2), expected, atol=1e-6, rtol=0)
    rebuilt = SentenceTransformer(
        modules=[
            ElmoSentenceTransformerModule.load(str(tmp_path / "st")),
            Pooling.load(str(tmp_path / "st"), subfolder="1_Pooling"),
        ],
        device="cpu",
    )
    np.testing.assert_allclose(rebuilt.encode(SENTENCES), expected, atol=1e-6, rtol=0)


def test_sentence_transformers_splits_raw_text_or_whitespace(tmp_path, one_thread):
    require("sentence_transformers")
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    from elmo_hf.integrations.sentence_transformers import ElmoSentenceTransformerModule

    model = tiny_model(seed=7)
    words = ElmoSentenceTransformerModule(model).tokenizer.tokenize
    assert words(RAW_SENTENCES[0]) != RAW_SENTENCES[0].split()  # "U.S." and "don't" are split apart
    for whitespace_split, split in ((False, words), (True, str.split)):
        elmo = ElmoSentenceTransformerModule(model, whitespace_split=whitespace_split)
        encoder = SentenceTransformer(modules=[elmo, Pooling(16, "mean")], device="cpu")
        expected = embedder_sentence_vectors(model, RAW_SENTENCES, split)
        np.testing.assert_allclose(encoder.encode(RAW_SENTENCES), expected, atol=1e-6, rtol=0)
    encoder.save(str(tmp_path / "st"))
    assert ElmoSentenceTransformerModule.load(str(tmp_path / "st")).whitespace_split is True


def test_sentence_transformers_top_layer_and_bad_layers(one_thread):
    require("sentence_transformers")
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    from elmo_hf.integrations.sentence_transformers import ElmoSentenceTransformerModule

    model = tiny_model(seed=4)
    elmo = ElmoSentenceTransformerModule(model, layers="top")
    encoder = SentenceTransformer(modules=[elmo, Pooling(16, "mean")], device="cpu")
    expected = ElmoEmbedder(model).embed_sentences([s.split() for s in SENTENCES], layers="top", sentence_vectors=True)
    np.testing.assert_allclose(encoder.encode(SENTENCES), np.stack(expected), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match='layers="all" gives several vectors per word'):
        ElmoSentenceTransformerModule(model, layers="all")
    with pytest.raises(ValueError, match="mix_weights needs 3 values"):
        ElmoSentenceTransformerModule(model, layers="mix", mix_weights=[1.0])


# ---- spaCy ----


@pytest.fixture
def spacy_pipeline(tmp_path):
    """A blank English pipeline (no download) with the elmo_hf component on a tiny random model; (nlp, model)."""
    spacy = require("spacy")
    import elmo_hf.integrations.spacy  # noqa: F401 - registers the factory

    model = tiny_model(seed=5)
    model.save_pretrained(tmp_path / "elmo")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo_hf", config={"model": str(tmp_path / "elmo"), "batch_size": 2})
    return nlp, model


def cosine(a, b):
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_spacy_component_sets_tensor_and_similarity_hooks(spacy_pipeline, one_thread):
    nlp, model = spacy_pipeline
    embedder = ElmoEmbedder(model)
    doc = nlp("The bank raised its rates, and we sat on the river bank.")
    words = [token.text for token in doc]
    expected = embedder.embed_sentence(words, layers="average")  # (words, 16)
    assert doc.tensor.shape == (len(doc), 16)
    np.testing.assert_allclose(doc.tensor, expected, atol=1e-6, rtol=0)
    # Tokens, spans and the doc take their vectors from the tensor, and compare them by cosine.
    np.testing.assert_array_equal(doc[1].vector, doc.tensor[1])
    assert doc[1].has_vector and doc[1:4].has_vector and doc.has_vector
    np.testing.assert_allclose(doc[1:4].vector, expected[1:4].mean(axis=0), atol=1e-6, rtol=0)
    np.testing.assert_allclose(doc.vector, expected.mean(axis=0), atol=1e-6, rtol=0)
    assert doc[1].similarity(doc[-2]) == pytest.approx(cosine(expected[1], expected[-2]), abs=1e-6)
    other = nlp("Rates rose at the bank.")
    other_vector = embedder.embed_sentence([t.text for t in other], layers="average").mean(axis=0)
    assert doc.similarity(other) == pytest.approx(cosine(expected.mean(axis=0), other_vector), abs=1e-6)
    assert doc[0:3].similarity(other) == pytest.approx(cosine(expected[0:3].mean(axis=0), other_vector), abs=1e-6)
    # The same word in two contexts has two vectors: ELMo, not a lookup table.
    assert doc[1].text == doc[-2].text == "bank" and doc[1].similarity(doc[-2]) < 0.999


def test_spacy_sentences_whitespace_and_pipe(spacy_pipeline, one_thread):
    nlp, model = spacy_pipeline
    embedder = ElmoEmbedder(model)
    nlp.add_pipe("sentencizer", first=True)
    text = "Dogs bark loudly.  Cats sleep all day."
    doc = nlp(text)
    sentences = [[t.text for t in sentence if not t.is_space] for sentence in doc.sents]
    assert len(sentences) == 2 and any(token.is_space for token in doc)
    expected = np.concatenate(embedder.embed_sentences(sentences, layers="average"))  # each sentence on its own
    words = [token.i for token in doc if not token.is_space]
    np.testing.assert_allclose(doc.tensor[words], expected, atol=1e-6, rtol=0)
    space = next(token for token in doc if token.is_space)
    assert not doc.tensor[space.i].any()
    np.testing.assert_allclose(doc.vector, expected.mean(axis=0), atol=1e-6, rtol=0)
    # nlp.pipe embeds several docs per model call and gives the same tensors.
    piped = list(nlp.pipe([text, "Birds sing.", text]))
    for result in (piped[0], piped[2]):
        np.testing.assert_allclose(result.tensor, doc.tensor, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match='layers="all" gives several vectors per word'):
        nlp.add_pipe("elmo_hf", name="all_layers", config={"layers": "all"})


def test_spacy_finds_the_component_by_entry_point(tmp_path):
    """An installed elmo-hf registers "elmo_hf" with spaCy: a fresh interpreter adds it without importing us."""
    require("spacy")
    if not importlib.metadata.entry_points(group="spacy_factories", name="elmo_hf"):
        message = "the installed elmo-hf metadata has no spacy_factories entry point (reinstall: pip install -e .)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    tiny_model(seed=8).save_pretrained(tmp_path / "elmo")
    code = (
        "import sys, spacy\n"
        f"nlp = spacy.blank('en'); nlp.add_pipe('elmo_hf', config={{'model': {str(tmp_path / 'elmo')!r}}})\n"
        "assert 'elmo_hf.integrations.spacy' in sys.modules\n"
        "print(nlp('Entry points work .').tensor.shape)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(4, 16)"


# ---- TensorFlow Hub's ELMo outputs ----


def test_tf_hub_signatures_and_outputs(one_thread):
    from elmo_hf.integrations.tf_hub import tf_hub_elmo

    model = tiny_model(seed=6)  # 2 LSTM layers, projection 8: word_emb 8, the others 16
    embedder = ElmoEmbedder(model)
    tokens = [["the", "cat", "is", "on", "the", "mat", ""], ["dogs", "are", "in", "the", "fog", "", ""]]
    with torch.no_grad():
        outputs = tf_hub_elmo(model, tokens, sequence_len=[6, 5])
        default_signature = tf_hub_elmo(model, ["the cat is on the mat", "dogs are in the fog"])
        top_heavy = tf_hub_elmo(model, tokens, sequence_len=[6, 5], layer_weights=[0.0, 0.0, 30.0], gamma=2.0)
    assert sorted(outputs) == ["default", "elmo", "lstm_outputs1", "lstm_outputs2", "word_emb"]
    assert outputs["word_emb"].shape == (2, 7, 8) and outputs["lstm_outputs1"].shape == (2, 7, 16)
    assert outputs["elmo"].shape == (2, 7, 16) and outputs["default"].shape == (2, 16)
    for row, length in enumerate([6, 5]):
        layers = embedder.embed_sentence(tokens[row][:length])  # (3, words, 16)
        np.testing.assert_allclose(outputs["word_emb"][row, :length], layers[0, :, :8], atol=1e-6, rtol=0)
        np.testing.assert_allclose(layers[0, :, 8:], layers[0, :, :8])  # layer 0 is word_emb twice
        np.testing.assert_allclose(outputs["lstm_outputs1"][row, :length], layers[1], atol=1e-6, rtol=0)
        np.testing.assert_allclose(outputs["lstm_outputs2"][row, :length], layers[2], atol=1e-6, rtol=0)
        np.testing.assert_allclose(outputs["elmo"][row, :length], layers.mean(axis=0), atol=1e-6, rtol=0)
        np.testing.assert_allclose(outputs["default"][row], layers.mean(axis=0).mean(axis=0), atol=1e-6, rtol=0)
        np.testing.assert_allclose(top_heavy["elmo"][row, :length], 2.0 * layers[2], atol=1e-5, rtol=0)
        assert not outputs["elmo"][row, length:].any() and not outputs["word_emb"][row, length:].any()
    # The default signature splits on spaces and gives the same numbers, up to the longest sentence.
    for name, value in default_signature.items():
        np.testing.assert_allclose(value, outputs[name][:, :6] if value.dim() == 3 else outputs[name], atol=1e-6)
    with pytest.raises(ValueError, match=r"sequence_len\[1\] is 8, expected 1..7"):
        tf_hub_elmo(model, tokens, sequence_len=[6, 8])
