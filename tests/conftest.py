"""Shared test fixtures: the reference fixtures (helpers.fixtures_path), a tokenizer, the loopback Hub and guard, one
thread. Plain helpers (tiny random models, scripts loaded as modules, reference computations) are in helpers.py."""

import os
import sys

import pytest
import torch
from helpers import REPO_ROOT, fixtures_path
from hub_server import FileServer
from hypothesis import settings as hypothesis_settings

from elmo_hf import ElmoTokenizer
from elmo_hf.convert.published import BASE_URL_VARIABLE, PUBLISHED_MODELS

sys.path.insert(0, str(REPO_ROOT))  # makes `conversion` importable without installing

# Property tests in CI draw the same examples on every run (derandomize), so that a failure can be replayed by
# running the suite again; each test states its max_examples (25, or 15 for the slow ones) in test_properties.py.
hypothesis_settings.register_profile(
    "ci", derandomize=True, max_examples=25, deadline=None, database=None, print_blob=True
)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")


@pytest.fixture(scope="session")
def fixtures_dir():
    """The reference fixtures; skipped when absent, a failure when CI is set."""
    path = fixtures_path()
    if not (path / "README.md").is_file():
        message = f"reference fixtures not found at {path} (set ELMO_FIXTURES to their folder)"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI requires them")
        pytest.skip(message)
    return path


@pytest.fixture
def tokenizer():
    return ElmoTokenizer(max_characters_per_token=20)


@pytest.fixture
def loopback_hub(tmp_path, monkeypatch):
    """A Hugging Face Hub served on 127.0.0.1 by `hub_server.LoopbackHub`, for the duration of one test.

    huggingface_hub reads `HF_ENDPOINT` and the cache paths when it is imported, so besides the environment
    (which child processes inherit, see `LoopbackHub.client_env`) the already imported constants are patched.
    Caches live under `tmp_path`. Connecting to any address other than the loopback interface fails the test.
    """
    import transformers.utils.hub
    from hub_server import LoopbackHub, loopback_guard
    from huggingface_hub import constants

    hub = LoopbackHub().start()
    env = hub.client_env(tmp_path / "hf_home")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HOME", env["HF_HOME"])
    monkeypatch.setattr(constants, "HF_HUB_CACHE", env["HF_HUB_CACHE"])
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(transformers.utils.hub, "_hf_api", None)  # its HfApi caches the endpoint it was made with
    try:
        with loopback_guard() as blocked:
            yield hub
    finally:
        hub.stop()
    assert not blocked, f"connections to non-loopback addresses: {blocked}"


@pytest.fixture
def loopback_only():
    """Fails the test if it connects a socket anywhere but the loopback interface (see hub_server.loopback_guard)."""
    from hub_server import loopback_guard

    with loopback_guard() as blocked:
        yield
    assert not blocked, f"connections to non-loopback addresses: {blocked}"


@pytest.fixture
def one_thread():
    """Run a test on one torch thread: tiny models are all per-call overhead, which a second thread only adds to,
    and on a busy machine two threads fight over the cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def published_server(fixtures_dir, monkeypatch, loopback_only):
    """Every published model's options and weights are the allennlp fixture pair, read from ../shared/fixtures."""
    options = (fixtures_dir / "allennlp_elmo" / "options.json").read_bytes()
    weights = (fixtures_dir / "allennlp_elmo" / "lm_weights.hdf5").read_bytes()
    files = {}
    for model in PUBLISHED_MODELS:
        files[f"/elmo/{model.options_path}"] = options
        files[f"/elmo/{model.weights_path}"] = weights
    with FileServer(files) as server:
        monkeypatch.setenv(BASE_URL_VARIABLE, server.url)
        server.weights = weights
        yield server
