"""ElmoEmbedder, embed_file and the token cache: outputs equal the model's, resumable and bounded-memory files."""

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch
from helpers import ATOL, REPO_ROOT, SENTENCES, direct_layers, read_output, tiny_model, write_lines

from elmo_hf import ElmoEmbedder
from elmo_hf.inference.embedder import length_batches

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny_elmo")
    tiny_model().save_pretrained(directory)
    return directory


@pytest.fixture
def embedder(model_dir):
    return ElmoEmbedder.from_pretrained(model_dir)


def test_embed_sentences_equal_direct_model_outputs_in_input_order(embedder):
    vectors = embedder.embed_sentences(SENTENCES, batch_size=2)
    for words, array in zip(SENTENCES, vectors):
        assert array.shape == (3, len(words), 16) and array.dtype == np.float32
        np.testing.assert_allclose(array, direct_layers(embedder.model, words), atol=ATOL, rtol=0)


def test_layer_selections_and_sentence_vectors(embedder):
    every = embedder.embed_sentences(SENTENCES)
    weights = [0.5, -1.0, 2.0]
    selections = {
        "top": (dict(layers="top"), [array[-1] for array in every]),
        "average": (dict(layers="average"), [array.mean(0) for array in every]),
        "mix": (dict(layers="mix", mix_weights=weights), [np.einsum("l,lwd->wd", weights, a) for a in every]),
    }
    for name, (settings, expected) in selections.items():
        for actual, wanted in zip(embedder.embed_sentences(SENTENCES, **settings), expected):
            np.testing.assert_allclose(actual, wanted, atol=1e-5, rtol=0, err_msg=name)
    sentence_vectors = embedder.embed_sentences(SENTENCES, sentence_vectors=True)
    for actual, array in zip(sentence_vectors, every):
        assert actual.shape == (3, 16)
        np.testing.assert_allclose(actual, array.mean(axis=1), atol=1e-5, rtol=0)  # boundaries not averaged in
    top_vectors = embedder.embed_sentences(SENTENCES, layers="top", sentence_vectors=True)
    np.testing.assert_allclose(top_vectors[0], every[0][-1].mean(axis=0), atol=1e-5, rtol=0)


def test_length_batches_respect_both_limits_and_cover_every_sentence_once():
    lengths = [3, 10, 1, 7, 7, 2, 30, 4]
    batches = list(length_batches(lengths, batch_size=3, max_tokens_per_batch=27))
    assert sorted(index for batch in batches for index in batch) == list(range(len(lengths)))
    assert batches[0] == [6]  # 32 padded positions: too long for any batch, so it runs alone
    for batch in batches:
        assert len(batch) <= 3
        width = max(lengths[index] for index in batch) + 2
        assert len(batch) == 1 or len(batch) * width <= 27
    assert [lengths[batch[0]] for batch in batches] == sorted((lengths[b[0]] for b in batches), reverse=True)
    assert list(length_batches([5, 5, 5], batch_size=2)) == [[0, 1], [2]]


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(layers="bottom"), "layers must be one of all, top, average, mix; got 'bottom'"),
        (dict(layers="mix"), "mix_weights go with layers='mix' and only with it; got layers='mix', mix_weights=None"),
        (
            dict(layers="mix", mix_weights=[1.0, 2.0]),
            "mix_weights needs 3 values (the token layer and 2 LSTM layers), got 2: [1.0, 2.0]",
        ),
        (dict(batch_size=0), "batch_size must be a positive int, got 0"),
    ],
)
def test_bad_settings_are_named(embedder, settings, message):
    with pytest.raises(ValueError) as error:
        embedder.embed_sentences(SENTENCES, **settings)
    assert str(error.value) == message
    with pytest.raises(ValueError, match=r"sentence 1 must be a non-empty list of words, got \[\]"):
        embedder.embed_sentences([["fine"], []])


def test_token_cache_gives_the_same_vectors_and_skips_the_character_cnn(embedder):
    without = embedder.embed_sentences(SENTENCES, batch_size=2)
    state_keys = list(embedder.model.state_dict())
    embedder.set_token_cache(["The", "cat", "on", "the", ".", "Hello", "unused", "cat"])  # some words unknown
    partial = embedder.embed_sentences(SENTENCES, batch_size=2)
    embedder.set_token_cache({word for words in SENTENCES for word in words})

    # Every word is known now: the character CNN must not run at all.
    def character_cnn(*args):
        raise AssertionError("the character CNN ran")

    encoder = embedder.token_cache.character_encoder
    encoder.forward = character_cnn
    full = embedder.embed_sentences(SENTENCES, batch_size=2)
    del encoder.forward
    # Not bit-identical (the cache runs the CNN over other batches of words): docs/guarantees.md's bound, 1e-6 times
    # the sentence's largest absolute value.
    for reference, with_some, with_all in zip(without, partial, full):
        bound = 1e-6 * max(np.abs(reference).max(), 1.0)
        assert np.abs(with_some - reference).max() <= bound
        assert np.abs(with_all - reference).max() <= bound
    assert list(embedder.model.state_dict()) == state_keys  # the model itself is untouched
    embedder.set_token_cache(None)
    np.testing.assert_array_equal(embedder.embed_sentences(SENTENCES, batch_size=2)[0], without[0])
    with pytest.raises(ValueError, match=r"set_token_cache needs at least one word \(or None to remove the cache\)"):
        embedder.set_token_cache([])


def test_token_cache_matches_bilm_tf_dumped_token_embeddings(fixtures_dir):
    from elmo_hf.convert.convert_bilm_tf import convert_hdf5

    folder = fixtures_dir / "allennlp_elmo"
    model, _, _ = convert_hdf5(folder / "options.json", folder / "lm_weights.hdf5")
    embedder = ElmoEmbedder(model)
    words = (folder / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    embedder.set_token_cache(words)
    char_ids = torch.tensor(embedder.tokenizer.convert_tokens_to_ids(words))
    with h5py.File(folder / "elmo_token_embeddings.hdf5", "r") as file:
        expected = file["embedding"][...]
    with torch.no_grad():
        looked_up = embedder.token_cache(char_ids).numpy()
    np.testing.assert_allclose(looked_up, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("suffix", [".hdf5", ".npz"])
def test_embed_file_equals_direct_model_outputs(embedder, tmp_path, suffix):
    lines = SENTENCES * 3  # repeated lines: sentence_to_index keeps the last index, as allennlp's did
    write_lines(tmp_path / "input.txt", lines)
    output = tmp_path / f"vectors{suffix}"
    summary = embedder.embed_file(tmp_path / "input.txt", output, batch_size=4, chunk_size=4, progress=False)
    assert summary["sentences"] == 15 and summary["tokens"] == 3 * sum(map(len, SENTENCES))
    arrays, sentence_to_index = read_output(output)
    assert sorted(arrays, key=int) == [str(index) for index in range(15)]
    for index, words in enumerate(lines):
        np.testing.assert_allclose(arrays[str(index)], direct_layers(embedder.model, words), atol=ATOL, rtol=0)
    assert sentence_to_index == {" ".join(words): str(10 + index) for index, words in enumerate(SENTENCES)}
    assert not (tmp_path / f"vectors{suffix}.partial").exists()


def test_embed_file_top_sentence_vectors_and_tokenize(embedder, tmp_path):
    (tmp_path / "input.txt").write_text("The cat sat.\nHello, world!\n", encoding="utf-8")
    output = tmp_path / "vectors.npz"
    embedder.embed_file(
        tmp_path / "input.txt", output, tokenize=True, layers="top", sentence_vectors=True, progress=False
    )
    arrays, sentence_to_index = read_output(output)
    expected = embedder.embed_sentences(
        [["The", "cat", "sat", "."], ["Hello", ",", "world", "!"]], layers="top", sentence_vectors=True
    )
    assert arrays["0"].shape == (16,)
    np.testing.assert_allclose(arrays["0"], expected[0], atol=ATOL, rtol=0)
    np.testing.assert_allclose(arrays["1"], expected[1], atol=ATOL, rtol=0)
    assert sentence_to_index == {"The cat sat.": "0", "Hello, world!": "1"}


def test_embed_file_refuses_empty_lines_existing_outputs_unknown_formats_and_pipes(embedder, tmp_path):
    (tmp_path / "input.txt").write_text("one line\n\ntwo\n  \n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"has empty lines \(first ones: \[2, 4\]\); ELMo needs at least one word"):
        embedder.embed_file(tmp_path / "input.txt", tmp_path / "out.npz", progress=False)
    (tmp_path / "taken.npz").write_bytes(b"")
    with pytest.raises(FileExistsError, match="taken.npz already exists; remove it or choose another output name"):
        embedder.embed_file(tmp_path / "input.txt", tmp_path / "taken.npz", progress=False)
    with pytest.raises(ValueError, match=r"output must end in .hdf5, .h5 or .npz, got '.*out.txt'"):
        embedder.embed_file(tmp_path / "input.txt", tmp_path / "out.txt", progress=False)
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(
        ValueError, match="pipe is not a regular file: it is read more than once, which a pipe cannot be"
    ):
        embedder.embed_file(tmp_path / "pipe", tmp_path / "out.npz", progress=False)


class Interrupted(Exception):
    pass


def test_interrupted_npz_run_resumes_to_the_identical_file(embedder, tmp_path, monkeypatch):
    lines = SENTENCES * 4  # 20 lines, 7 chunks of 3
    write_lines(tmp_path / "input.txt", lines)
    settings = dict(batch_size=2, chunk_size=3, progress=False)
    embedder.embed_file(tmp_path / "input.txt", tmp_path / "reference.npz", **settings)

    import elmo_hf.inference.embedder as module

    write_chunk, written = module._write_chunk, []

    def interrupt_after_three_chunks(*args):
        if len(written) == 3:
            raise Interrupted
        written.append(args[1])
        write_chunk(*args)

    monkeypatch.setattr(module, "_write_chunk", interrupt_after_three_chunks)
    with pytest.raises(Interrupted):
        embedder.embed_file(tmp_path / "input.txt", tmp_path / "vectors.npz", **settings)
    monkeypatch.undo()
    assert not (tmp_path / "vectors.npz").exists()  # an unfinished run never leaves a file at the output name
    partial = tmp_path / "vectors.npz.partial"
    assert sorted(path.name for path in partial.glob("chunk-*")) == [f"chunk-0000000{i}.npz" for i in range(3)]

    with pytest.raises(FileExistsError, match=r"holds an unfinished run: pass resume=True \(--resume\) to continue"):
        embedder.embed_file(tmp_path / "input.txt", tmp_path / "vectors.npz", **settings)
    with pytest.raises(
        ValueError, match=r"these settings differ from the unfinished run's: chunk_size \(was 3, now 4\)"
    ):
        embedder.embed_file(
            tmp_path / "input.txt", tmp_path / "vectors.npz", **{**settings, "chunk_size": 4}, resume=True
        )
    summary = embedder.embed_file(tmp_path / "input.txt", tmp_path / "vectors.npz", **settings, resume=True)
    assert summary["sentences"] == 20 - 9  # the three saved chunks are not redone
    assert (tmp_path / "vectors.npz").read_bytes() == (tmp_path / "reference.npz").read_bytes()
    assert not partial.exists()


# Runs the command line, killed by SIGKILL just before its third chunk would be renamed into place.
KILLED_RUN = """
import os, signal, sys
from elmo_hf.cli import main

replace, renamed = os.replace, []

def replace_or_die(source, target):
    if os.path.basename(target).startswith("chunk-"):
        renamed.append(target)
        if len(renamed) == 3:
            os.kill(os.getpid(), signal.SIGKILL)
    replace(source, target)

os.replace = replace_or_die
main(sys.argv[1:])
"""


def run_python(code, *arguments):
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", code, *arguments], env=environment, capture_output=True, text=True, timeout=300
    )


def test_killed_hdf5_run_resumes_to_an_identical_file(model_dir, tmp_path):
    from elmo_hf.cli import main

    write_lines(tmp_path / "input.txt", SENTENCES * 4)
    command = ["embed", str(tmp_path / "input.txt"), "--model", str(model_dir), "--chunk-size", "3", "--quiet"]
    main([*command[:2], str(tmp_path / "reference.hdf5"), *command[2:]])

    killed = run_python(KILLED_RUN, *command[:2], str(tmp_path / "vectors.hdf5"), *command[2:])
    assert killed.returncode == -9, killed.stderr
    assert not (tmp_path / "vectors.hdf5").exists()
    partial = tmp_path / "vectors.hdf5.partial"
    # The third chunk was fully written under its temporary name, which a resumed run ignores and rewrites.
    assert sorted(path.name for path in partial.glob("chunk-*")) == [
        "chunk-00000000.npz",
        "chunk-00000001.npz",
        "chunk-00000002.npz.tmp",
    ]
    main([*command[:2], str(tmp_path / "vectors.hdf5"), *command[2:], "--resume"])
    resumed, resumed_index = read_output(tmp_path / "vectors.hdf5")
    reference, reference_index = read_output(tmp_path / "reference.hdf5")
    assert resumed.keys() == reference.keys() and resumed_index == reference_index
    for key in reference:
        np.testing.assert_array_equal(resumed[key], reference[key])
    assert (tmp_path / "vectors.hdf5").read_bytes() == (tmp_path / "reference.hdf5").read_bytes()
    assert not partial.exists()


def test_embed_file_holds_one_chunk_of_vectors_at_a_time(tmp_path, monkeypatch):
    """What the code controls, not the allocator: the vectors are numpy arrays, which tracemalloc traces (torch's
    buffers are not), so the traced peak is what embed_file holds in Python objects and arrays; and every chunk's
    arrays are freed before the next chunk is written."""
    import gc
    import tracemalloc
    import weakref

    import elmo_hf.inference.embedder

    # 1,600 lines of 20 words, 3 layers of 128 floats per word: 49 MiB of vectors, 8 chunks of 6 MiB.
    model = tiny_model(projection_dim=64, lstm_dim=96)
    rng = np.random.default_rng(0)
    vocabulary = [f"w{index}" for index in range(500)]
    write_lines(tmp_path / "input.txt", [list(rng.choice(vocabulary, size=20)) for _ in range(1600)])
    chunk_size, chunk_bytes = 200, 200 * 20 * 3 * 128 * 4

    write_chunk = elmo_hf.inference.embedder._write_chunk
    written = []  # weak references to each written chunk's arrays

    def checked_write_chunk(work_dir, chunk, first_line, arrays):
        gc.collect()
        alive = [index for index, references in enumerate(written) if any(ref() is not None for ref in references)]
        assert alive == [], f"chunks {alive} still in memory while chunk {chunk} is written"
        written.append([weakref.ref(array) for array in arrays])
        write_chunk(work_dir, chunk, first_line, arrays)

    monkeypatch.setattr(elmo_hf.inference.embedder, "_write_chunk", checked_write_chunk)
    embedder = ElmoEmbedder(model)
    tracemalloc.start()
    try:
        embedder.embed_file(tmp_path / "input.txt", tmp_path / "out.hdf5", batch_size=128, chunk_size=chunk_size)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(written) == 8
    # Holding every vector would take 8 chunks (49 MiB); streaming holds one chunk and what writes it (measured:
    # 1.3 chunks).
    assert peak < 2 * chunk_bytes, f"traced peak {peak / 2**20:.1f} MiB, a chunk is {chunk_bytes / 2**20:.1f} MiB"
    with h5py.File(tmp_path / "out.hdf5", "r") as file:
        assert len(file) == 1601 and file["1599"].shape == (3, 20, 128)
