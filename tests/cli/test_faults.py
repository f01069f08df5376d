"""The output side under faults: a full disk at several fill points, a read-only or missing folder, a permission
denial, and interrupts (SIGINT, SIGTERM), for `elmo-hf embed`, `convert` (files and --published), `export-onnx`, and
`save_pretrained` from Python.

Each command ends in one line, `error: <path>: cannot be written: <what happened>; <what to do>`, and exit status 2
(an interrupt: one line saying how to continue, and 128 + the signal's number); it leaves no half-written output and
no temporary file except the ones a rerun continues from; the rerun (with --resume where the line says so) gives
exactly the uninterrupted run's output.

The full and read-only disks are small tmpfs mounts (root on Linux); where mounting fails those cases skip, and the
fake file system (`FaultyOpen`: ENOSPC, EROFS or EACCES at the n-th write of a Python-level file) still runs. As root
no permission is ever denied, so EACCES always comes from the fake.
"""

import builtins
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request

import pytest
import test_cli
from helpers import REPO_ROOT, tiny_model, write_lines

from elmo_hf import ElmoModel
from elmo_hf.cli import main

model_dir = test_cli.model_dir  # the fixture: a tiny model's folder

pytestmark = pytest.mark.usefixtures("one_thread")

PAGE = 4096  # tmpfs allocates whole pages
WORDS = "the cat sat on the mat while a dog ran across the busy street to find its ball again".split()
LINES = [WORDS[index % 7 :] + WORDS[: index % 5] for index in range(60)]  # 60 lines of 13-20 words
CHUNK_SIZE = 10  # six chunks


class SmallDisk:
    """A tmpfs of `size` bytes mounted at `path`; `leave_free(n)` fills it up to n free bytes, `make_room()` empties
    the filler again."""

    def __init__(self, path, size=4 << 20, read_only=False):
        path.mkdir()
        options = f"size={size}" + (",ro" if read_only else "")
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); the fake file system runs")
        self.path, self.filler = path, path / "filler"

    def free(self):
        stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize

    def leave_free(self, count):
        self.make_room()
        with open(self.filler, "wb") as filler:
            filler.write(b"\0" * ((self.free() - count) // PAGE * PAGE))
        assert abs(self.free() - count) < PAGE

    def make_room(self):
        if self.filler.exists():
            self.filler.unlink()

    def unmount(self):
        subprocess.run(["umount", "-l", str(self.path)], check=True)

    def entries(self):
        """What is on the disk besides the filler."""
        return sorted(str(path.relative_to(self.path)) for path in self.path.rglob("*") if path != self.filler)


@pytest.fixture
def disk(tmp_path):
    disk = SmallDisk(tmp_path / "disk")
    yield disk
    disk.unmount()


@pytest.fixture
def read_only_disk(tmp_path):
    disk = SmallDisk(tmp_path / "read-only", size=1 << 20, read_only=True)
    yield disk
    disk.unmount()


class FaultyOpen:
    """builtins.open, except that the `nth` file opened for writing under `root` (counting from 1) raises
    OSError(`code`), as a full disk, a read-only file system or a permission denial would."""

    def __init__(self, root, code, nth):
        self.root, self.code, self.nth, self.opened = str(root), code, nth, 0
        self.open = builtins.open

    def __call__(self, file, mode="r", *args, **kwargs):
        if any(flag in mode for flag in "wax+") and os.path.abspath(str(file)).startswith(self.root):
            self.opened += 1
            if self.opened == self.nth:
                raise OSError(self.code, os.strerror(self.code), str(file))
        return self.open(file, mode, *args, **kwargs)


def run(arguments, capsys):
    """`elmo-hf ARGUMENTS` in this process: (exit status, stderr)."""
    try:
        main(arguments)
        status = 0
    except SystemExit as stop:
        status = stop.code
    return status, capsys.readouterr().err


def one_line(err):
    """The one line a failed command printed (progress bars aside)."""
    lines = [line for line in err.splitlines() if line.startswith(("error:", "interrupted", "Traceback"))]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


FULL = r"cannot be written: no space left on the device \((about [\d.]+ \w+ needed, )?[\d.]+ \w+ free\); make room or choose another folder"  # noqa: E501


# ---- embed ----


@pytest.fixture
def embed_case(model_dir, tmp_path, capsys):
    """(the command for an OUTPUT, the uninterrupted run's output bytes for a suffix)."""
    write_lines(tmp_path / "input.txt", LINES)
    command = ["embed", str(tmp_path / "input.txt"), None, "--model", str(model_dir), "--chunk-size", str(CHUNK_SIZE)]
    command += ["--quiet"]

    def for_output(output):
        return [*command[:2], str(output), *command[3:]]

    references = {}

    def reference(suffix):
        if suffix not in references:
            status, err = run(for_output(tmp_path / f"reference{suffix}"), capsys)
            assert status == 0, err
            references[suffix] = (tmp_path / f"reference{suffix}").read_bytes()
        return references[suffix]

    return for_output, reference


@pytest.mark.parametrize("fill_point", ["before the first chunk", "after two chunks", "while assembling"])
def test_embed_on_a_full_disk_keeps_what_resume_needs_and_resumes_to_the_same_file(
    embed_case, disk, fill_point, capsys
):
    for_output, reference = embed_case
    expected = reference(".hdf5")
    chunk = len(expected) // 6 + PAGE  # about one chunk's file
    free = {"before the first chunk": 0, "after two chunks": 2 * chunk + PAGE, "while assembling": 8 * chunk}
    disk.leave_free(free[fill_point])
    output = disk.path / "vectors.hdf5"
    status, err = run(for_output(output), capsys)
    assert status == 2
    kept = {"before the first chunk": 0, "after two chunks": 2, "while assembling": 6}[fill_point]
    resume = (
        f"; the {kept} finished chunks are kept in {output}.partial/: run the same command with --resume "
        "\\(resume=True\\) to continue"
        if kept
        else ""
    )
    assert re.fullmatch(f"error: {re.escape(str(output))}: {FULL}{resume}", one_line(err)), err
    partial = [f"vectors.hdf5.partial/chunk-0000000{index}.npz" for index in range(kept)]
    assert disk.entries() == (["vectors.hdf5.partial", *partial, "vectors.hdf5.partial/manifest.json"] if kept else [])

    disk.make_room()
    status, err = run(for_output(output) + (["--resume"] if kept else []), capsys)
    assert status == 0, err
    assert output.read_bytes() == expected and disk.entries() == ["vectors.hdf5"]


def test_embed_into_a_read_only_folder_is_one_line(embed_case, read_only_disk, capsys):
    for_output, _ = embed_case
    output = read_only_disk.path / "vectors.hdf5"
    status, err = run(for_output(output), capsys)
    assert status == 2
    assert one_line(err) == (
        f"error: {output}: cannot be written: the file system is read-only; choose a folder you can write to"
    )
    with pytest.raises(OSError, match="Read-only file system"):  # --debug keeps the traceback
        main([*for_output(output), "--debug"])


@pytest.mark.parametrize(
    "code, fail_at, message",
    [
        (errno.EACCES, 1, "permission denied; choose a folder you can write to, or change its permissions"),
        (errno.ENOSPC, 3, None),  # the manifest, the first chunk, then the second
        (errno.EROFS, 1, "the file system is read-only; choose a folder you can write to"),
    ],
)
def test_embed_on_a_faulty_file_system_resumes_to_the_same_file(
    embed_case, tmp_path, monkeypatch, capsys, code, fail_at, message
):
    for_output, reference = embed_case
    expected = reference(".npz")
    folder = tmp_path / "faulty"
    output = folder / "vectors.npz"
    with monkeypatch.context() as patch:
        patch.setattr(builtins, "open", FaultyOpen(folder, code, fail_at))
        status, err = run(for_output(output), capsys)
    assert status == 2
    if message is None:
        assert re.fullmatch(
            rf"error: {re.escape(str(output))}: cannot be written: no space left on the device \(about .* needed, "
            rf".* free\); make room or choose another folder; the 1 finished chunks are kept in .*--resume.*",
            one_line(err),
        ), err
    else:
        assert one_line(err) == f"error: {output}: cannot be written: {message}"
    leftovers = sorted(path.name for path in folder.rglob("*"))
    kept = fail_at > 1
    assert leftovers == (["chunk-00000000.npz", "manifest.json", "vectors.npz.partial"] if kept else [])
    status, err = run(for_output(output) + (["--resume"] if kept else []), capsys)
    assert status == 0, err
    assert output.read_bytes() == expected


def test_embed_into_a_path_under_a_file_is_one_line(embed_case, tmp_path, capsys):
    for_output, _ = embed_case
    (tmp_path / "a_file").write_text("")
    output = tmp_path / "a_file" / "vectors.hdf5"
    status, err = run(for_output(output), capsys)
    assert status == 2
    assert one_line(err) == (
        f"error: {output}: cannot be written: a part of its path is a file, not a folder; choose another path"
    )


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_embed_interrupted_in_this_process_says_how_to_resume(embed_case, tmp_path, monkeypatch, capsys, signal_number):
    """The signal is sent to this process right after the third chunk is saved."""
    import elmo_hf.inference.embedder

    for_output, reference = embed_case
    expected = reference(".hdf5")
    write_chunk, output = elmo_hf.inference.embedder._write_chunk, tmp_path / "vectors.hdf5"

    def write_then_signal(work_dir, chunk, *arguments):
        write_chunk(work_dir, chunk, *arguments)
        if chunk == 2:
            os.kill(os.getpid(), signal_number)

    handler = signal.getsignal(signal.SIGTERM)
    with monkeypatch.context() as patch:
        patch.setattr(elmo_hf.inference.embedder, "_write_chunk", write_then_signal)
        status, err = run(for_output(output), capsys)
    assert status == 128 + signal_number
    name = signal.Signals(signal_number).name
    assert one_line(err) == (
        f"interrupted ({name}); 3 of 6 chunks are kept in {output}.partial/: run the same command with --resume to "
        "continue"
    )
    assert signal.getsignal(signal.SIGTERM) is handler  # the command's handler is gone with it
    status, err = run(for_output(output) + ["--resume"], capsys)
    assert status == 0, err
    assert output.read_bytes() == expected and not (tmp_path / "vectors.hdf5.partial").exists()


# A run of the console script that saves two chunks, then waits (as a long chunk would) for the test's signal.
SLOW_RUN = """
import os, sys, time
import elmo_hf.inference.embedder as embedder

write_chunk = embedder._write_chunk

def write_then_wait(work_dir, chunk, *arguments):
    write_chunk(work_dir, chunk, *arguments)
    if chunk == 1:
        print("two chunks saved", flush=True)
        time.sleep(60)

embedder._write_chunk = write_then_wait
from elmo_hf.cli import main
main(sys.argv[1:])
"""


def test_embed_stops_on_sigterm_from_outside_and_resumes(embed_case, tmp_path, capsys):
    """`kill PID` on the command line: the one line, exit 143, and --resume. The child waits 60 s after its second
    chunk, so ending within the 30 s allowed shows that the signal, not the end of the work, stopped it."""
    signal_number = signal.SIGTERM
    for_output, reference = embed_case
    expected = reference(".hdf5")
    output = tmp_path / "vectors.hdf5"
    environment = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen(
        [sys.executable, "-c", SLOW_RUN, *for_output(output)],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline() == "two chunks saved\n"
    child.send_signal(signal_number)
    _, err = child.communicate(timeout=30)
    assert child.returncode == 128 + signal_number
    name = signal.Signals(signal_number).name
    assert err == (
        f"interrupted ({name}); 2 of 6 chunks are kept in {output}.partial/: run the same command with --resume to "
        "continue\n"
    )
    status, err = run(for_output(output) + ["--resume"], capsys)
    assert status == 0, err
    assert output.read_bytes() == expected


# ---- convert (files) ----


@pytest.fixture
def bilm_files(fixtures_dir):
    return fixtures_dir / "allennlp_elmo" / "options.json", fixtures_dir / "allennlp_elmo" / "lm_weights.hdf5"


def convert_command(bilm_files, output_dir):
    options, weights = bilm_files
    return ["convert", "--options", str(options), "--weights", str(weights), "--output-dir", str(output_dir)]


CHECKPOINT_FILES = ("config.json", "model.safetensors", "tokenizer_config.json", "conversion_report.json")


@pytest.fixture
def converted(bilm_files, tmp_path, capsys):
    status, err = run(convert_command(bilm_files, tmp_path / "reference"), capsys)
    assert status == 0, err
    return {name: (tmp_path / "reference" / name).read_bytes() for name in CHECKPOINT_FILES}


@pytest.mark.parametrize("fill_point", [0.05, 0.5, 0.9, 0.99])
def test_convert_on_a_full_disk_leaves_no_folder_and_reruns_to_the_same_checkpoint(
    bilm_files, converted, disk, tmp_path, fill_point, capsys
):
    total = sum(path.stat().st_size for path in (tmp_path / "reference").iterdir())
    disk.leave_free(int(total * fill_point) // PAGE * PAGE)
    output = disk.path / "elmo"
    status, err = run(convert_command(bilm_files, output), capsys)
    assert status == 2
    assert re.fullmatch(f"error: {re.escape(str(output))}: {FULL}", one_line(err)), err
    assert disk.entries() == []  # no folder, no temporary sibling

    disk.make_room()
    status, err = run(convert_command(bilm_files, output), capsys)
    assert status == 0, err
    assert {name: (output / name).read_bytes() for name in CHECKPOINT_FILES} == converted


def test_convert_into_an_existing_folder_keeps_it_as_it_was_on_a_full_disk(bilm_files, converted, disk, capsys):
    output = disk.path / "elmo"
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    disk.leave_free(16 * PAGE)
    status, err = run(convert_command(bilm_files, output), capsys)
    assert status == 2 and "no space left on the device" in err
    assert disk.entries() == ["elmo", "elmo/notes.txt"]
    disk.make_room()
    status, err = run(convert_command(bilm_files, output), capsys)
    assert status == 0, err
    assert (output / "notes.txt").read_text() == "mine"
    assert {name: (output / name).read_bytes() for name in CHECKPOINT_FILES} == converted


@pytest.mark.parametrize(
    "code, message",
    [
        (errno.EACCES, "permission denied; choose a folder you can write to, or change its permissions"),
        (errno.EROFS, "the file system is read-only; choose a folder you can write to"),
        (errno.EDQUOT, None),
    ],
)
def test_convert_on_a_faulty_file_system_is_one_line(bilm_files, tmp_path, monkeypatch, capsys, code, message):
    folder = tmp_path / "faulty"
    folder.mkdir()
    with monkeypatch.context() as patch:
        patch.setattr(builtins, "open", FaultyOpen(folder, code, nth=5))  # while the code files are copied
        status, err = run(convert_command(bilm_files, folder / "elmo"), capsys)
    assert status == 2
    if message is None:
        message = r"the disk quota is exceeded \(about .* needed, .* free\); make room or choose another folder"
        assert re.fullmatch(f"error: {re.escape(str(folder / 'elmo'))}: cannot be written: {message}", one_line(err))
    else:
        assert one_line(err) == f"error: {folder / 'elmo'}: cannot be written: {message}"
    assert list(folder.iterdir()) == []


def test_convert_into_a_read_only_folder_is_one_line(bilm_files, read_only_disk, capsys):
    output = read_only_disk.path / "elmo"
    status, err = run(convert_command(bilm_files, output), capsys)
    assert status == 2
    assert one_line(err) == (
        f"error: {output}: cannot be written: the file system is read-only; choose a folder you can write to"
    )


# ---- convert --published ----


def same_model(folder, converted):
    """Whether `folder` holds the converted model (its report names the published files, not the fixture's)."""
    return all((folder / name).read_bytes() == converted[name] for name in CHECKPOINT_FILES[:3])


def test_published_download_on_a_full_disk_keeps_its_part_and_resumes(
    published_server, converted, disk, tmp_path, capsys
):
    downloads = disk.path / "downloads"
    command = ["convert", "--published", "small", "--download-dir", str(downloads), "--output-dir"]
    command.append(str(tmp_path / "elmo-small"))
    disk.leave_free(40 * PAGE)  # the weights are 440 KB
    status, err = run(command, capsys)
    assert status == 2
    weights = downloads / "small" / "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5"
    assert re.fullmatch(
        f"error: {re.escape(str(weights))}: {FULL}; the \\d+ bytes that arrived are kept in "
        f"{re.escape(str(weights))}.part: run the same command again to resume",
        one_line(err),
    ), err
    assert not weights.exists() and weights.with_name(weights.name + ".part").stat().st_size > 0

    disk.make_room()
    status, err = run(command, capsys)
    assert status == 0, err
    assert published_server.requests[-1][1].startswith("bytes=")  # the second run asked for the rest only
    assert same_model(tmp_path / "elmo-small", converted)


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_published_download_interrupted_by_a_signal_says_how_to_resume(
    published_server, converted, tmp_path, monkeypatch, capsys, signal_number
):
    """The signal reaches this process once the first 64 KB of the weights arrived."""
    import elmo_hf.convert.published

    urlopen = urllib.request.urlopen

    def signalled_midway(request, *arguments, **keywords):
        response = urlopen(request, *arguments, **keywords)
        if request.full_url.endswith(".hdf5") and not request.headers:
            read, reads = response.read, []

            def read_then_signal(size):
                reads.append(size)
                if len(reads) == 2:
                    os.kill(os.getpid(), signal_number)
                return read(size)

            response.read = read_then_signal
        return response

    monkeypatch.setattr(elmo_hf.convert.published, "CHUNK_BYTES", 1 << 16)
    downloads, output = tmp_path / "downloads", tmp_path / "elmo-small"
    command = ["convert", "--published", "small", "--download-dir", str(downloads), "--output-dir", str(output)]
    with monkeypatch.context() as patch:
        patch.setattr(urllib.request, "urlopen", signalled_midway)
        status, err = run(command, capsys)
    assert status == 128 + signal_number
    name = signal.Signals(signal_number).name
    assert one_line(err) == (
        f"interrupted ({name}); the download is kept in {downloads / 'small'}/: run the same command again to resume it"
    )
    part = downloads / "small" / "elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5.part"
    assert part.stat().st_size == 1 << 16 and not output.exists()
    status, err = run(command, capsys)
    assert status == 0, err
    assert published_server.requests[-1][1] == f"bytes={1 << 16}-"
    assert same_model(output, converted)


# ---- export-onnx ----


@pytest.fixture(scope="module")
def exported(model_dir, tmp_path_factory):
    """The files of an export on a healthy disk."""
    pytest.importorskip("onnxruntime")
    from elmo_hf.inference.onnx_export import export_onnx

    folder = tmp_path_factory.mktemp("onnx")
    export_onnx(ElmoModel.from_pretrained(model_dir), folder)
    return {path.name: path.read_bytes() for path in folder.iterdir()}


@pytest.mark.parametrize("fill_point", [0.3, 0.95])
def test_export_onnx_on_a_full_disk_leaves_no_folder_and_reruns_to_the_same_files(
    model_dir, exported, disk, fill_point, capsys
):
    disk.leave_free(int(sum(map(len, exported.values())) * fill_point) // PAGE * PAGE)
    output = disk.path / "onnx"
    command = ["export-onnx", "--model", str(model_dir), "--output", str(output)]
    status, err = run(command, capsys)
    assert status == 2
    assert re.fullmatch(f"error: {re.escape(str(output))}: {FULL}", one_line(err)), err
    assert disk.entries() == []
    if fill_point > 0.5:  # (one rerun is enough: an export takes seconds)
        disk.make_room()
        status, err = run(command, capsys)
        assert status == 0, err
        assert {path.name: path.read_bytes() for path in output.iterdir()} == exported


def test_export_onnx_with_permission_denied_is_one_line(model_dir, exported, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "faulty"
    with monkeypatch.context() as patch:
        patch.setattr(builtins, "open", FaultyOpen(folder, errno.EACCES, nth=1))
        status, err = run(["export-onnx", "--model", str(model_dir), "--output", str(folder / "onnx")], capsys)
    assert status == 2
    assert one_line(err) == (
        f"error: {folder / 'onnx'}: cannot be written: permission denied; choose a folder you can write to, or "
        "change its permissions"
    )
    assert list(folder.iterdir()) == []


# ---- save_pretrained from Python: transformers' behaviour, documented in docs/guarantees.md ----


@pytest.mark.parametrize("free_pages", [20, 55])
def test_save_pretrained_on_a_full_disk_raises_and_leaves_a_folder_without_weights(disk, free_pages):
    disk.leave_free(free_pages * PAGE)  # 20: while the code is copied; 55: while the weights are written
    model = tiny_model(seed=5)
    with pytest.raises(Exception) as raised:  # noqa: PT011 - OSError, or safetensors' own SafetensorError
        model.save_pretrained(disk.path / "model")
    assert "No space left on device" in str(raised.value) or "os error 28" in str(raised.value)
    assert not (disk.path / "model" / "model.safetensors").exists()
    with pytest.raises(OSError):
        ElmoModel.from_pretrained(disk.path / "model")
    disk.make_room()
    model.save_pretrained(disk.path / "model")  # a second call over the leftovers completes the folder
    assert json.loads((disk.path / "model" / "config.json").read_text())["model_type"] == "elmo"
    shutil.rmtree(disk.path / "model")
