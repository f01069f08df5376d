"""The adapters in elmo_hf.integrations: sentence-transformers, spaCy and TensorFlow Hub's ELMo outputs, each on a
tiny random model and on a small model converted from ELMoForManyLangs (tests/data/efml), with a battery of malformed
inputs and settings at the end. A library that is not installed skips its tests (a failure when CI is set)."""

import importlib
import importlib.metadata
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT, tiny_model

import elmo_hf
from elmo_hf import ElmoEmbedder, ElmoModel, ElmoTokenizer, cli

EFML_DATA = REPO_ROOT / "tests" / "data" / "efml"
EFML_SENTENCES = json.loads((EFML_DATA / "sentences.json").read_text(encoding="utf-8"))

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


@pytest.fixture(scope="module")
def efml_checkpoint(tmp_path_factory):
    """A small ELMoForManyLangs model with a word embedding, converted by `elmo-hf convert --elmoformanylangs`: its
    tokenizer reads character and word lexicons, so a byte tokenizer cannot encode text for it."""
    folder = tmp_path_factory.mktemp("efml") / "cnn_word"
    cli.main(["convert", "--elmoformanylangs", str(EFML_DATA / "cnn_word"), "--output-dir", str(folder)])
    assert ElmoModel.from_pretrained(folder).config.char_vocabulary == "lexicon"
    return folder


def run_offline(code, folder):
    """Run Python `code` in a fresh interpreter in `folder`, with HF_HUB_OFFLINE=1 and one thread, this checkout's
    elmo_hf importable; its stdout (the test fails on a non-zero exit)."""
    environment = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO_ROOT))
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, env=environment, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


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


def st_encoder(elmo, pooling="mean"):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    return SentenceTransformer(modules=[elmo, Pooling(elmo.get_embedding_dimension(), pooling)], device="cpu")


@pytest.mark.parametrize("pooling", ["mean", "max", "cls", "lasttoken"])
def test_sentence_transformers_sentences_without_words_get_zero_vectors(pooling, one_thread):
    """ "" and whitespace give the zero vector in every pooling mode; the other sentences of the batch are unchanged."""
    require("sentence_transformers")
    from elmo_hf.integrations.sentence_transformers import ElmoSentenceTransformerModule

    model = tiny_model(seed=3)
    encoder = st_encoder(ElmoSentenceTransformerModule(model), pooling)
    vectors = encoder.encode([SENTENCES[0], "", SENTENCES[2], " \t\n", SENTENCES[1]], batch_size=8)
    assert vectors.shape == (5, 16)
    assert not vectors[1].any() and not vectors[3].any()
    alone = encoder.encode([SENTENCES[0], SENTENCES[2], SENTENCES[1]], batch_size=8)
    np.testing.assert_allclose(vectors[[0, 2, 4]], alone, atol=1e-6, rtol=0)
    assert np.abs(alone).min(axis=1).max() > 0  # a sentence with words has a vector
    if pooling == "mean":
        np.testing.assert_allclose(
            alone, embedder_sentence_vectors(model, [SENTENCES[i] for i in (0, 2, 1)]), atol=1e-6
        )
        (words,) = encoder.encode([""], output_value="token_embeddings")
        assert tuple(words.shape) == (1, 16) and not words.any()


def test_sentence_transformers_errors_name_the_callers_index(one_thread):
    """encode sorts its inputs by length: the bad one is third here, but first of the second batch of two."""
    require("sentence_transformers")
    from elmo_hf.integrations.sentence_transformers import ElmoSentenceTransformerModule

    encoder = st_encoder(ElmoSentenceTransformerModule(tiny_model(seed=3)))
    inputs = ["Short .", SENTENCES[2], None, SENTENCES[0]]
    with pytest.raises(TypeError, match=r"^input 2 must be a string, got NoneType: None$"):
        encoder.encode(inputs, batch_size=2)
    # Called directly, positions are the caller's own.
    with pytest.raises(TypeError, match=r"^input 1 must be a string, got int: 7$"):
        encoder[0].preprocess(["fine", 7])


def test_sentence_transformers_max_seq_length_keeps_the_first_words(one_thread):
    require("sentence_transformers")
    from elmo_hf.integrations.sentence_transformers import ElmoSentenceTransformerModule

    model = tiny_model(seed=4)
    encoder = st_encoder(ElmoSentenceTransformerModule(model, whitespace_split=True))
    assert encoder.max_seq_length is None
    encoder.max_seq_length = 3
    assert encoder.max_seq_length == 3 == encoder[0].max_seq_length
    vectors = encoder.encode(SENTENCES)
    first_words = [" ".join(sentence.split()[:3]) for sentence in SENTENCES]
    np.testing.assert_allclose(vectors, embedder_sentence_vectors(model, first_words), atol=1e-6, rtol=0)
    assert not np.allclose(vectors[0], embedder_sentence_vectors(model, SENTENCES[:1])[0], atol=1e-3)
    (words,) = encoder.encode([SENTENCES[2]], output_value="token_embeddings")
    assert tuple(words.shape) == (3, 16)
    encoder.max_seq_length = None
    np.testing.assert_allclose(encoder.encode(SENTENCES), embedder_sentence_vectors(model, SENTENCES), atol=1e-6)
    # A tokenizer that limits sentences (max_words) is told about in one line, which says what to set.
    limited = ElmoTokenizer(max_characters_per_token=20, max_words=4)
    encoder = st_encoder(ElmoSentenceTransformerModule(model, tokenizer=limited, whitespace_split=True))
    with pytest.raises(ValueError, match=r"^input 2 has 7 words, more than the tokenizer's max_words=4: set max_seq"):
        encoder.encode([SENTENCES[1], "A b .", SENTENCES[0]], batch_size=2)
    encoder.max_seq_length = 4
    expected = embedder_sentence_vectors(model, ["The cat sat on"])
    np.testing.assert_allclose(encoder.encode(SENTENCES[:1]), expected, atol=1e-6, rtol=0)


def test_sentence_transformers_elmoformanylangs_checkpoint(efml_checkpoint, one_thread):
    """The module takes the converted model's lexicon tokenizer, from the folder or from a loaded model's own path."""
    require("sentence_transformers")
    from elmo_hf.integrations.sentence_transformers import ElmoSentenceTransformerModule

    texts = [" ".join(words) for words in EFML_SENTENCES]
    expected = np.stack(
        ElmoEmbedder.from_pretrained(efml_checkpoint).embed_sentences(
            EFML_SENTENCES, layers="average", sentence_vectors=True
        )
    )
    for source in (str(efml_checkpoint), ElmoModel.from_pretrained(efml_checkpoint)):
        elmo = ElmoSentenceTransformerModule(source, whitespace_split=True)
        assert elmo.tokenizer.char_lexicon is not None
        np.testing.assert_allclose(st_encoder(elmo).encode(texts, batch_size=3), expected, atol=1e-5, rtol=0)


def test_sentence_transformers_save_then_load_a_copy_offline_in_a_fresh_process(efml_checkpoint, tmp_path, one_thread):
    require("sentence_transformers")
    from elmo_hf.integrations.sentence_transformers import ElmoSentenceTransformerModule

    texts = [" ".join(words) for words in EFML_SENTENCES] + ["", "Le café était très bon . " * 3]
    elmo = ElmoSentenceTransformerModule(str(efml_checkpoint), layers="top", whitespace_split=True, max_seq_length=8)
    encoder = st_encoder(elmo)
    vectors = encoder.encode(texts, batch_size=4)
    encoder.save(str(tmp_path / "saved"))
    shutil.copytree(tmp_path / "saved", tmp_path / "elsewhere" / "copy")
    shutil.rmtree(tmp_path / "saved")
    (tmp_path / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    code = (
        "import json, numpy as np, torch\n"
        "from sentence_transformers import SentenceTransformer\n"
        "torch.set_num_threads(1)\n"
        "model = SentenceTransformer('elsewhere/copy', trust_remote_code=True, device='cpu')\n"
        "print(model.max_seq_length, type(model[0]).__name__)\n"
        "texts = json.load(open('texts.json', encoding='utf-8'))\n"
        "np.save('reloaded.npy', model.encode(texts, batch_size=4))\n"
    )
    assert run_offline(code, tmp_path).split() == ["8", "ElmoSentenceTransformerModule"]
    np.testing.assert_array_equal(np.load(tmp_path / "reloaded.npy"), vectors)


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


SPACY_TEXT = "The bank raised its rates.  We sat on the river bank."


def test_spacy_to_disk_writes_the_weights_and_a_copy_loads_offline_in_a_fresh_process(tmp_path, one_thread):
    """The pipeline folder holds the weights: with the original model folder gone and the Hub offline, spacy.load on
    a copy elsewhere (a fresh process) and nlp.from_bytes give the same doc.tensor, and the hooks work."""
    spacy = require("spacy")
    import elmo_hf.integrations.spacy  # noqa: F401 - registers the factory

    tiny_model(seed=9).save_pretrained(tmp_path / "elmo")
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo_hf", config={"model": str(tmp_path / "elmo"), "batch_size": 2})
    doc = nlp(SPACY_TEXT)
    data = nlp.to_bytes()
    nlp.to_disk(tmp_path / "pipeline")
    assert (tmp_path / "pipeline" / "elmo_hf" / "model.safetensors").is_file()
    shutil.copytree(tmp_path / "pipeline", tmp_path / "elsewhere" / "copy")
    shutil.rmtree(tmp_path / "pipeline")
    shutil.rmtree(tmp_path / "elmo")

    code = (
        "import numpy as np, spacy, torch\n"
        "import elmo_hf.integrations.spacy\n"
        "torch.set_num_threads(1)\n"
        "nlp = spacy.load('elsewhere/copy')\n"
        f"doc = nlp({SPACY_TEXT!r})\n"
        "np.save('tensor.npy', doc.tensor)\n"
        "print(repr(doc[1].similarity(doc[-2])))\n"
    )
    similarity = float(run_offline(code, tmp_path))
    np.testing.assert_array_equal(np.load(tmp_path / "tensor.npy"), doc.tensor)
    assert similarity == doc[1].similarity(doc[-2]) != 0.0

    rebuilt = spacy.util.load_model_from_config(nlp.config).from_bytes(data)
    np.testing.assert_array_equal(rebuilt(SPACY_TEXT).tensor, doc.tensor)


def test_spacy_elmoformanylangs_checkpoint(efml_checkpoint, one_thread):
    spacy = require("spacy")
    from spacy.tokens import Doc

    import elmo_hf.integrations.spacy  # noqa: F401 - registers the factory

    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo_hf", config={"model": str(efml_checkpoint), "layers": "top"})
    embedder = ElmoEmbedder.from_pretrained(efml_checkpoint)
    for words in EFML_SENTENCES[:3]:
        doc = nlp(Doc(nlp.vocab, words=words))
        np.testing.assert_allclose(doc.tensor, embedder.embed_sentence(words, layers="top"), atol=1e-5, rtol=0)
    # The lexicons travel with the weights.
    rebuilt = spacy.util.load_model_from_config(nlp.config).from_bytes(nlp.to_bytes())
    assert rebuilt.get_pipe("elmo_hf").embedder.tokenizer.word_lexicon is not None
    np.testing.assert_array_equal(rebuilt(Doc(rebuilt.vocab, words=words)).tensor, doc.tensor)


def test_spacy_pipe_with_worker_processes_says_why_not(spacy_pipeline, one_thread):
    """Worker processes return docs without their hooks (Doc.to_bytes drops them): nlp.pipe(n_process=2) says so in
    one line, and the way it suggests (workers without ELMo, then ELMo here) gives the vectors and the hooks."""
    nlp, model = spacy_pipeline
    texts = ["Dogs bark.", "Cats sleep all day."]
    with pytest.raises(ValueError) as error:
        list(nlp.pipe(texts, n_process=2))
    reason = str(error.value).strip().splitlines()[-1]
    assert reason.startswith("ValueError: the elmo_hf component does not run under nlp.pipe(n_process > 1): ")
    assert "drops the vector and similarity hooks" in reason
    docs = list(nlp.get_pipe("elmo_hf").pipe(nlp.pipe(texts, n_process=2, disable=["elmo_hf"])))
    embedder = ElmoEmbedder(model)
    for doc in docs:
        expected = embedder.embed_sentence([token.text for token in doc], layers="average")
        np.testing.assert_allclose(doc.tensor, expected, atol=1e-6, rtol=0)
        assert "similarity" in doc.user_hooks
    assert docs[0].similarity(docs[1]) == pytest.approx(cosine(docs[0].vector, docs[1].vector), abs=1e-6)


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


def test_tf_hub_elmoformanylangs_checkpoint_needs_no_tokenizer(efml_checkpoint, one_thread):
    from elmo_hf import ElmoConfig
    from elmo_hf.integrations.tf_hub import tf_hub_elmo

    model = ElmoModel.from_pretrained(efml_checkpoint).eval()
    embedder = ElmoEmbedder.from_pretrained(efml_checkpoint)
    sentences = EFML_SENTENCES[:3]
    width = max(len(words) for words in sentences)
    tokens = [words + [""] * (width - len(words)) for words in sentences]
    with torch.no_grad():
        outputs = tf_hub_elmo(model, tokens, sequence_len=[len(words) for words in sentences])
    for row, words in enumerate(sentences):
        layers = embedder.embed_sentence(words)  # (3, words, 16)
        np.testing.assert_allclose(outputs["lstm_outputs2"][row, : len(words)], layers[2], atol=1e-5, rtol=0)
        np.testing.assert_allclose(outputs["elmo"][row, : len(words)], layers.mean(axis=0), atol=1e-5, rtol=0)
    # Built in memory, a lexicon model has no checkpoint to take its tokenizer from: it says what to pass.
    settings = {key: value for key, value in model.config.to_dict().items() if key != "_name_or_path"}
    with pytest.raises(ValueError, match=r"pass tokenizer=ElmoTokenizer\.from_pretrained"):
        tf_hub_elmo(ElmoModel(ElmoConfig.from_dict(settings)), ["Le café"])


def test_tf_hub_takes_numpy_string_arrays(one_thread):
    from elmo_hf.integrations.tf_hub import tf_hub_elmo

    model = tiny_model(seed=6)
    tokens = [["the", "cat", "sat"], ["dogs", "bark", ""]]
    with torch.no_grad():
        expected = tf_hub_elmo(model, tokens, sequence_len=[3, 2])
        given = tf_hub_elmo(model, np.array(tokens), sequence_len=np.array([3, 2]))
    for name, value in expected.items():
        np.testing.assert_array_equal(given[name], value)


# ---- Malformed input and settings: one line naming the value, raised by elmo_hf (no torch error reaches the user)


def assert_one_line_error(excinfo, pattern):
    message = str(excinfo.value)
    assert "\n" not in message and re.search(pattern, message), message
    assert isinstance(excinfo.value, (TypeError, ValueError, OSError))
    package = pathlib.Path(elmo_hf.__file__).resolve().parent
    assert package in pathlib.Path(excinfo.traceback[-1].path).resolve().parents, excinfo.traceback[-1]


BAD_ST_INPUTS = {
    "None": (None, r"^input 1 must be a string, got NoneType: None$"),
    "int": (42, r"^input 1 must be a string, got int: 42$"),
    "float nan": (math.nan, r"^input 1 must be a string, got float: nan$"),
    "bytes": (b"caf\xc3\xa9", r"^input 1 must be a string, got bytes: b'caf\\xc3\\xa9'$"),
    "list of words": (["a", "dog"], r"^input 1 must be a string, got list: \['a', 'dog'\]$"),
    "text pair": (("a", "dog"), r"^input 1 must be a string, got tuple: \('a', 'dog'\)$"),
    "dict": ({"text": "a dog"}, r"^input 1 must be a string, got dict: \{'text': 'a dog'\}$"),
}


@pytest.mark.parametrize("bad", BAD_ST_INPUTS.values(), ids=BAD_ST_INPUTS.keys())
def test_sentence_transformers_malformed_inputs(bad, one_thread):
    require("sentence_transformers")
    from elmo_hf.integrations.sentence_transformers import ElmoSentenceTransformerModule

    value, pattern = bad
    encoder = st_encoder(ElmoSentenceTransformerModule(tiny_model(seed=3)))
    with pytest.raises((TypeError, ValueError)) as excinfo:
        encoder.encode(["A sentence somewhat longer than the others .", value, "Short ."], batch_size=2)
    assert_one_line_error(excinfo, pattern)


BAD_ST_SETTINGS = {
    "layers unknown": ({"layers": "bogus"}, r'^layers must be "average", "top" or "mix", got \'bogus\'$'),
    "layers all": ({"layers": "all"}, r'^layers="all" gives several vectors per word'),
    "mix without weights": ({"layers": "mix"}, r"needs mix_weights, a list of finite numbers .*got None$"),
    "mix weights not numbers": ({"layers": "mix", "mix_weights": ["a", 1, 1]}, r"got \['a', 1, 1\]$"),
    "mix weights count": ({"layers": "mix", "mix_weights": [1.0]}, r"^mix_weights needs 3 values .*got 1: \[1\.0\]$"),
    "weights without mix": ({"mix_weights": [1, 1, 1]}, r"mix_weights go with layers=\"mix\" only"),
    "whitespace_split": ({"whitespace_split": "yes"}, r"^whitespace_split must be True or False, got 'yes'$"),
    "max_seq_length 0": ({"max_seq_length": 0}, r"^max_seq_length must be a positive int or None, got 0$"),
    "max_seq_length float": ({"max_seq_length": 2.5}, r"got 2\.5$"),
    "max_seq_length str": ({"max_seq_length": "5"}, r"got '5'$"),
    "max_seq_length bool": ({"max_seq_length": True}, r"got True$"),
    "model number": ({"model": 42}, r"^model must be a checkpoint folder or a Hub model name, got 42$"),
    "model missing": ({"model": "/no/such/folder"}, r"^model '/no/such/folder' cannot be loaded: "),
    "tokenizer": ({"tokenizer": "tok"}, r"^tokenizer must be an ElmoTokenizer, got str$"),
}


@pytest.mark.parametrize("bad", BAD_ST_SETTINGS.values(), ids=BAD_ST_SETTINGS.keys())
def test_sentence_transformers_malformed_settings(bad):
    require("sentence_transformers")
    from elmo_hf.integrations.sentence_transformers import ElmoSentenceTransformerModule

    settings, pattern = bad
    settings = {"model": tiny_model(seed=3), **settings}
    with pytest.raises((TypeError, ValueError, OSError)) as excinfo:
        ElmoSentenceTransformerModule(**settings)
    assert_one_line_error(excinfo, pattern)
    # max_seq_length is checked the same way when set on a built module.
    if "max_seq_length" in settings:
        elmo = ElmoSentenceTransformerModule(tiny_model(seed=3))
        with pytest.raises(ValueError) as excinfo:
            elmo.max_seq_length = settings["max_seq_length"]
        assert_one_line_error(excinfo, pattern)


BAD_SPACY_SETTINGS = {
    "layers unknown": ({"layers": "bogus"}, r'^layers must be "average", "top" or "mix", got \'bogus\'$'),
    "layers all": ({"layers": "all"}, r'^layers="all" gives several vectors per word'),
    "mix without weights": ({"layers": "mix"}, r"needs mix_weights, a list of finite numbers .*got None$"),
    "mix weights count": (
        {"layers": "mix", "mix_weights": [1, 2]},
        r"^mix_weights needs 3 values for model '.*elmo' \(the token layer and 2 LSTM layers\), got 2: \[1, 2\]$",
    ),
    "weights without mix": ({"mix_weights": [1, 1, 1]}, r"mix_weights go with layers=\"mix\" only"),
    "batch_size 0": ({"batch_size": 0}, r"^batch_size must be a positive int, got 0$"),
    "batch_size str": ({"batch_size": "64"}, r"^batch_size must be a positive int, got '64'$"),
    "batch_size bool": ({"batch_size": True}, r"^batch_size must be a positive int, got True$"),
    "device unknown": ({"device": "gpu"}, r'^device must be a torch device such as "cpu" or "cuda:0", got \'gpu\'$'),
    "device absent": ({"device": "cuda:99"}, r"^device 'cuda:99' is not available here \(\d+ CUDA devices\)"),
    "model number": ({"model": 42}, r"^model must be a checkpoint folder or a Hub model name, got 42$"),
    "model empty": ({"model": " "}, r"^model must be a checkpoint folder or a Hub model name, got ' '$"),
    "model not a checkpoint": ({"model": "EMPTY"}, r"^model '.*empty' is a folder without config\.json"),
}


@pytest.mark.parametrize("bad", BAD_SPACY_SETTINGS.values(), ids=BAD_SPACY_SETTINGS.keys())
def test_spacy_malformed_settings_fail_at_add_pipe(bad, spacy_pipeline, tmp_path):
    nlp, _ = spacy_pipeline
    settings, pattern = bad
    (tmp_path / "empty").mkdir()
    settings = {"model": nlp.get_pipe("elmo_hf").model_name, **settings}
    if settings["model"] == "EMPTY":
        settings["model"] = str(tmp_path / "empty")
    with pytest.raises((TypeError, ValueError)) as excinfo:
        nlp.add_pipe("elmo_hf", name="second", config=settings)
    assert_one_line_error(excinfo, pattern)


def test_spacy_weights_are_read_at_initialize_or_first_doc(tmp_path):
    """A model that is not a folder here may exist where a saved pipeline came from: add_pipe accepts it, and
    nlp.initialize() (or the first doc) says in one line that it cannot be loaded."""
    spacy = require("spacy")
    import elmo_hf.integrations.spacy  # noqa: F401 - registers the factory

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo_hf", config={"model": str(tmp_path / "gone" / "elmo")})
    for run in (nlp.initialize, lambda: nlp("Dogs bark .")):
        with pytest.raises(OSError) as excinfo:
            run()
        assert_one_line_error(excinfo, r"^model '.*gone/elmo' cannot be loaded: ")


def test_spacy_docs_without_words_get_zero_vectors(spacy_pipeline, one_thread):
    """An empty doc, a doc of whitespace, whitespace words of a Doc built from words: zeros, not errors."""
    from spacy.tokens import Doc

    nlp, model = spacy_pipeline
    assert nlp("").tensor.shape == (0, 16)
    blank = nlp(" \n\t ")
    assert blank.tensor.shape == (len(blank), 16) and not blank.tensor.any() and not blank.vector.any()
    doc = nlp(Doc(nlp.vocab, words=["river", "\u3000", "bank"]))
    assert not doc.tensor[1].any()
    expected = ElmoEmbedder(model).embed_sentence(["river", "bank"], layers="average")
    np.testing.assert_allclose(doc.tensor[[0, 2]], expected, atol=1e-6, rtol=0)
    np.testing.assert_allclose(doc.vector, expected.mean(axis=0), atol=1e-6, rtol=0)


BAD_TF_HUB_INPUTS = {
    "empty batch": ([], {}, r"^tokens is empty: give at least one sentence$"),
    "bare string": ("the cat sat", {}, r"^tokens must be a list of sentences, got the string 'the cat sat'; wrap it"),
    "bare string, lengths": ("the cat", {"sequence_len": [2]}, r"got the string 'the cat'; wrap it"),
    "a number": (42, {}, r"^tokens must be a list of sentences, got int: 42$"),
    "sentence without words": (["the cat", "  "], {}, r"^tokens\[1\] has no words: '  '$"),
    "None sentence": (["the cat", None], {}, r"^tokens\[1\] must be a string .*got NoneType: None$"),
    "word lists without lengths": ([["the", "cat"]], {}, r"^tokens\[0\] must be a string \(without sequence_len"),
    "lengths count": ([["a", "b"]], {"sequence_len": [2, 1]}, r"^sequence_len has 2 lengths for 1 sentences$"),
    "length 0": ([["a", "b"]], {"sequence_len": [0]}, r"^sequence_len\[0\] is 0, expected 1\.\.2"),
    "length too long": ([["a", "b"]], {"sequence_len": [3]}, r"^sequence_len\[0\] is 3, expected 1\.\.2"),
    "length bool": ([["a", "b"]], {"sequence_len": [True]}, r"^sequence_len\[0\] must be an int, got True$"),
    "length str": ([["a", "b"]], {"sequence_len": ["2"]}, r"^sequence_len\[0\] must be an int, got '2'$"),
    "lengths not a list": ([["a", "b"]], {"sequence_len": 2}, r"^sequence_len must be a list of ints, got 2$"),
    "row a string": (["a b"], {"sequence_len": [2]}, r"^tokens\[0\] must be a list of words, got str: 'a b'$"),
    "None word": ([["a", None]], {"sequence_len": [2]}, r"^tokens\[0\]\[1\] must be a string, got NoneType: None$"),
    "bytes word": ([[b"cat"]], {"sequence_len": [1]}, r"^tokens\[0\]\[0\] must be a string, got bytes: b'cat'$"),
    "padding inside": ([["a", "", "b"]], {"sequence_len": [3]}, r"^tokens\[0\]\[1\] is '', a padding word inside"),
    "layer_weights words": (["a"], {"layer_weights": ["x", "y", "z"]}, r"^layer_weights must be 3 numbers, got"),
    "layer_weights count": (["a"], {"layer_weights": [1.0]}, r"^layer_weights needs 3 values, got shape \(1,\)$"),
    "gamma str": (["a"], {"gamma": "2"}, r"^gamma must be a number or a one-element tensor, got '2'$"),
    "not a model": (["a"], {"model": "./elmo"}, r"^model must be an ElmoModel, got str$"),
}


@pytest.mark.parametrize("bad", BAD_TF_HUB_INPUTS.values(), ids=BAD_TF_HUB_INPUTS.keys())
def test_tf_hub_malformed_inputs(bad):
    from elmo_hf.integrations.tf_hub import tf_hub_elmo

    tokens, arguments, pattern = bad
    arguments = {"model": tiny_model(seed=6), **arguments}
    with pytest.raises((TypeError, ValueError)) as excinfo:
        tf_hub_elmo(tokens=tokens, **arguments)
    assert_one_line_error(excinfo, pattern)
