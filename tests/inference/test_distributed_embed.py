"""`elmo-hf embed` on several processes (torchrun, accelerate launch, gloo on the CPU) and `embed_dataset`.

A chunk's vectors do not depend on the process that computes it, so two processes must write the very bytes
that one process writes, and a run killed mid-way must resume, with another number of processes, to that file.
"""

import json
import os
import signal
import subprocess

import datasets
import numpy as np
import pytest
from helpers import REPO_ROOT, TWO_PROCESS_LAUNCHERS, read_output, tiny_model

from elmo_hf import ElmoEmbedder, cli

pytestmark = pytest.mark.usefixtures("one_thread")

TORCHRUN, ACCELERATE = TWO_PROCESS_LAUNCHERS["torchrun"], TWO_PROCESS_LAUNCHERS["accelerate"]
# Lines of 1 to 9 words, so that chunks differ in length and in how they batch.
LINES = [" ".join(f"w{(line * 7 + word) % 23}" for word in range(1 + line % 9)) for line in range(40)]
CHUNK_SIZE = 3  # 14 chunks, the last one short


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny_elmo")
    tiny_model(seed=5).save_pretrained(directory)
    return directory


@pytest.fixture
def input_file(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    return path


def embed_arguments(input_file, output, model_dir, *extra):
    return [
        "embed",
        str(input_file),
        str(output),
        "--model",
        str(model_dir),
        "--device",
        "cpu",
        "--quiet",
        "--chunk-size",
        str(CHUNK_SIZE),
        "--batch-size",
        "2",
        *extra,
    ]


def launch(launcher, arguments, tmp_path, env=None):
    """Run `elmo-hf embed` on 2 processes: `arguments` is one argv, or a list of argvs run one after the other by
    tests/inference/embed_rank.py. Returns the completed process."""
    if isinstance(arguments[0], str):
        command = [*launcher, "-m", "elmo_hf.cli", *arguments]
    else:
        argv_file = tmp_path / "argvs.json"
        argv_file.write_text(json.dumps(arguments), encoding="utf-8")
        command = [*launcher, str(REPO_ROOT / "tests" / "inference" / "embed_rank.py"), str(argv_file)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    # Its own process group, so that a hung run's processes are killed with it.
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.parametrize("launcher", [TORCHRUN, ACCELERATE], ids=["torchrun", "accelerate"])
def test_the_documented_command_writes_the_one_process_file(launcher, model_dir, input_file, tmp_path):
    cli.main(embed_arguments(input_file, tmp_path / "one.hdf5", model_dir))
    result = launch(launcher, embed_arguments(input_file, tmp_path / "two.hdf5", model_dir), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "two.hdf5").read_bytes() == (tmp_path / "one.hdf5").read_bytes()
    assert not (tmp_path / "two.hdf5.partial").exists()


def test_two_processes_write_the_bytes_of_one_for_every_format(model_dir, input_file, tmp_path):
    cases = [(suffix, extra) for suffix in (".hdf5", ".npz") for extra in ([], ["--sentence-vectors"])]
    for index, (suffix, extra) in enumerate(cases):
        cli.main(embed_arguments(input_file, tmp_path / f"one-{index}{suffix}", model_dir, *extra))
    argvs = [
        embed_arguments(input_file, tmp_path / f"two-{index}{suffix}", model_dir, *extra)
        for index, (suffix, extra) in enumerate(cases)
    ]
    result = launch(TORCHRUN, argvs, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for index, (suffix, extra) in enumerate(cases):
        one, two = tmp_path / f"one-{index}{suffix}", tmp_path / f"two-{index}{suffix}"
        assert two.read_bytes() == one.read_bytes(), (suffix, extra)
    # The processes shared the work: each saved every other chunk of every run.
    chunks = -(-len(LINES) // CHUNK_SIZE)
    for rank in range(2):
        saved = json.loads((tmp_path / f"chunks-{rank}.json").read_text(encoding="utf-8"))
        expected = [
            [f"two-{index}{suffix}.partial", chunk]
            for index, (suffix, _) in enumerate(cases)
            for chunk in range(rank, chunks, 2)
        ]
        assert saved == expected, rank
    arrays, sentence_to_index = read_output(tmp_path / "one-0.hdf5")
    assert len(arrays) == len(LINES) and sentence_to_index[LINES[-1]] == str(len(LINES) - 1)


def test_a_killed_two_process_run_resumes_on_one_process_to_the_same_file(model_dir, input_file, tmp_path):
    cli.main(embed_arguments(input_file, tmp_path / "one.npz", model_dir))
    output = tmp_path / "two.npz"
    killed = launch(
        TORCHRUN, [embed_arguments(input_file, output, model_dir)], tmp_path, env={"ELMO_TEST_FAIL_AFTER_CHUNKS": "2"}
    )
    assert killed.returncode != 0
    saved = sorted(path.name for path in (tmp_path / "two.npz.partial").glob("chunk-*.npz"))
    assert not output.exists() and 2 <= len(saved) < -(-len(LINES) // CHUNK_SIZE), saved
    cli.main([*embed_arguments(input_file, output, model_dir), "--resume"])
    assert output.read_bytes() == (tmp_path / "one.npz").read_bytes()


def test_embed_dataset_equals_embed_sentences(model_dir):
    embedder = ElmoEmbedder.from_pretrained(model_dir)
    sentences = [line.split() for line in LINES]
    dataset = datasets.Dataset.from_dict({"tokens": sentences, "id": list(range(len(sentences)))})
    for options in ({"layers": "all"}, {"layers": "average", "sentence_vectors": True}):
        embedded = embedder.embed_dataset(dataset, map_batch_size=7, batch_size=3, **options)
        assert embedded.column_names == ["tokens", "id", "elmo"]
        expected = embedder.embed_sentences(sentences, batch_size=3, **options)
        for row, vectors in zip(embedded.with_format("numpy"), expected):
            assert row["elmo"].dtype == np.float32 and row["elmo"].shape == vectors.shape
            np.testing.assert_allclose(row["elmo"], vectors, rtol=0, atol=1e-6)


def test_embed_dataset_keeps_this_process_share_under_torchrun(model_dir, monkeypatch):
    embedder = ElmoEmbedder.from_pretrained(model_dir)
    dataset = datasets.Dataset.from_dict({"tokens": [line.split() for line in LINES]})
    shares = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        shares.append(list(embedder.embed_dataset(dataset, layers="top")["tokens"]))
    assert sorted(map(tuple, shares[0] + shares[1])) == sorted(map(tuple, dataset["tokens"]))
    assert len(shares[0]) == len(shares[1]) == len(LINES) // 2


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"column": "words"}, "dataset has no column 'words'; its columns are ['tokens']"),
        ({"output_column": "tokens"}, "dataset already has a column 'tokens': choose another output_column"),
    ],
)
def test_embed_dataset_names_a_bad_column(model_dir, arguments, message):
    dataset = datasets.Dataset.from_dict({"tokens": [["a", "b"]]})
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ElmoEmbedder.from_pretrained(model_dir).embed_dataset(dataset, **arguments)
