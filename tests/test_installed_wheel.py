"""The wheel works without the checkout: built from the tree, installed non-editable into a fresh venv, its
`elmo-hf convert`, `elmo-hf embed` and `elmo-hf perplexity` run from a folder outside the checkout.

The venv gets only the wheel; its dependencies (torch, transformers, h5py) come from this interpreter's
site-packages through a plain path line in a .pth file, which puts them after the venv's own site-packages and
does not run their .pth files (so an editable install of elmo_hf there stays inactive). That keeps the test at
seconds instead of minutes of installing torch.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest
from helpers import REPO_ROOT

# What .gitignore ignores: build products anywhere, local data at the top (converted checkpoints, outputs).
NOT_SOURCE_ANYWHERE = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".pytest_cache", ".hypothesis")
NOT_SOURCE_AT_THE_TOP = shutil.ignore_patterns("build", "dist", "outputs", "elmo-*")


def not_source(folder, names):
    ignored = NOT_SOURCE_ANYWHERE(folder, names)
    return ignored | NOT_SOURCE_AT_THE_TOP(folder, names) if os.path.samefile(folder, REPO_ROOT) else ignored


def run(command, cwd, env, timeout=300):
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv folder, environment for its commands, a working folder outside the checkout)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO_ROOT, source, ignore=not_source)  # builds leave build/ and *.egg-info behind: not here
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(root / "dist"), str(source)],
        cwd=root,
        env=environment,
    )
    (wheel,) = (root / "dist").glob("elmo_hf-*.whl")
    venv = root / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root, env=environment)
    python = venv / "bin" / "python"
    run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], cwd=root, env=environment)
    venv_site = run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root, environment
    ).stdout.strip()
    with open(os.path.join(venv_site, "dependencies_from_the_test_interpreter.pth"), "w", encoding="utf-8") as pth:
        pth.write(sysconfig.get_paths()["purelib"] + "\n")
    environment.update(PATH=f"{venv / 'bin'}{os.pathsep}{environment['PATH']}", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    work = root / "work"
    work.mkdir()
    return venv, environment, work


def test_the_package_comes_from_the_venv_without_the_conversion_package(installed):
    venv, environment, work = installed
    code = "import importlib.util, elmo_hf; print(elmo_hf.__file__); print(importlib.util.find_spec('conversion'))"
    printed = run([str(venv / "bin" / "python"), "-c", code], work, environment).stdout.split()
    assert printed[0].startswith(str(venv)) and not printed[0].startswith(str(REPO_ROOT)), printed
    assert printed[1] == "None"
    assert shutil.which("elmo-hf", path=environment["PATH"]) == str(venv / "bin" / "elmo-hf")


def test_convert_then_embed_outside_the_checkout(installed, fixtures_dir):
    venv, environment, work = installed
    folder = fixtures_dir / "allennlp_elmo"
    converted = run(
        [
            "elmo-hf",
            "convert",
            "--options",
            str(folder / "options.json"),
            "--weights",
            str(folder / "lm_weights.hdf5"),
            "--output-dir",
            "converted",
        ],
        work,
        environment,
    )
    assert "converted 33 datasets; outputs match bilm-tf's arithmetic" in converted.stderr
    report = json.loads((work / "converted" / "conversion_report.json").read_text())
    assert report["converter"] == "elmo_hf.convert.convert_bilm_tf" and report["verification_max_abs_difference"] < 1e-5
    (work / "input.txt").write_text("The cat sat .\nHello\n", encoding="utf-8")
    run(
        ["elmo-hf", "embed", "input.txt", "vectors.npz", "--model", "converted", "--layers", "top", "--quiet"],
        work,
        environment,
    )
    vectors = np.load(work / "vectors.npz")
    # --layers top: (words, 2 * projection_dim) per line; the fixture's projection_dim is 16.
    assert vectors["0"].shape == (4, 32) and vectors["1"].shape == (1, 32)
    assert np.isfinite(vectors["0"]).all() and np.abs(vectors["0"]).max() > 0


def test_perplexity_of_the_shipped_model_outside_the_checkout(installed):
    venv, environment, work = installed
    (work / "text.txt").write_text("the cat sat on the mat .\na dog ran home\n", encoding="utf-8")
    printed = run(
        ["elmo-hf", "perplexity", "--text", "text.txt", "--protocol", "stateless", "--json"], work, environment
    ).stdout
    result = json.loads(printed)
    assert result["protocol"] == "stateless" and result["targets_per_direction"] == 13  # 11 words + 2 sentence ends
    assert 1 < result["perplexity"] < 10_000  # the shipped model's vocabulary has 20,000 words
