"""Nothing large in git: no tracked file over 20 MB, nothing over 1 MB but a packaged model's weights, and what runs
write (training state, checkpoints, outputs) is ignored whole."""

import fnmatch
import subprocess

import pytest
from helpers import REPO_ROOT

MAX_BYTES = 20 * 10**6
MAX_BYTES_BUT_A_MODEL = 10**6
# A packaged model's weights: the shipped one, and the trained ones the tests keep as fixed references.
PACKAGED_WEIGHTS = ("elmo_hf/pretrained/*/model.safetensors", "tests/models/*/model.safetensors")


def git(*arguments):
    done = subprocess.run(["git", *arguments], cwd=REPO_ROOT, capture_output=True, text=True)
    if done.returncode == 128:  # not a git checkout (an unpacked source archive)
        pytest.skip(f"not a git checkout: {done.stderr.strip()}")
    return done


def tracked_sizes():
    """{path: bytes} of every file git tracks that exists in the working tree."""
    names = git("ls-files", "-z").stdout.split("\0")
    paths = [REPO_ROOT / name for name in names if name]
    return {str(path.relative_to(REPO_ROOT)): path.stat().st_size for path in paths if path.is_file()}


def test_no_tracked_file_is_over_20_mb_and_only_packaged_weights_are_over_1_mb():
    sizes = tracked_sizes()
    assert "setup.py" in sizes
    too_large = {name: size for name, size in sizes.items() if size > MAX_BYTES}
    assert not too_large, f"tracked files over {MAX_BYTES:,} bytes: {too_large}"
    large = {
        name: size
        for name, size in sizes.items()
        if size > MAX_BYTES_BUT_A_MODEL and not any(fnmatch.fnmatch(name, pattern) for pattern in PACKAGED_WEIGHTS)
    }
    assert not large, f"tracked files over {MAX_BYTES_BUT_A_MODEL:,} bytes that are not a packaged model: {large}"


@pytest.mark.parametrize(
    "path",
    [
        "training/english-run/checkpoint-12000/model.safetensors",
        "training/english-run/checkpoint-12000/optimizer.pt",
        "training/english-run/run/checkpoint-4000/trainer_state.json",
        "training/notes.txt",
        "outputs/corpus/news/train.txt",
        "outputs/model/model.safetensors",
    ],
)
def test_training_state_and_outputs_are_ignored_whole(path):
    done = git("check-ignore", "--no-index", "-q", path)
    assert done.returncode == 0, f"{path} is not ignored by .gitignore"
