"""A checkpoint saved by an earlier layout of the package (the modules flat in elmo_hf/, tests/data/checkpoints/
README.md) still loads: the package and the code the checkpoint carries give bit-identical vectors on this machine,
and both equal the vectors stored when it was saved (to atol 1e-6: another CPU may round the last bits otherwise)."""

import json
import pathlib

import numpy as np
import torch
from helpers import REPO_ROOT, run_offline_without_repository
from transformers import AutoModel, AutoTokenizer

import elmo_hf  # noqa: F401  (registers the ELMo classes with the Auto classes)

CHECKPOINT = REPO_ROOT / "tests" / "data" / "checkpoints" / "tiny_elmo_flat_layout"
EXPECTED = CHECKPOINT.with_name(CHECKPOINT.name + "_vectors.npy")
SENTENCES = [["The", "cat", "sat", "on", "the", "mat", "."], ["Saved", "checkpoints", "keep", "loading", "."], ["Hi"]]

# The same computation in this process and in the child: every layer's vectors (batch, layers, words, dim), on one
# thread so that the sums run in one order.
VECTORS = """
torch.set_num_threads(1)
batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
with torch.no_grad():
    vectors = torch.stack(model(**batch, output_hidden_states=True).hidden_states, dim=1)
"""


def vectors_with_the_package():
    model = AutoModel.from_pretrained(CHECKPOINT)
    tokenizer = AutoTokenizer.from_pretrained(CHECKPOINT)
    assert type(model).__module__.startswith("elmo_hf."), type(model).__module__
    scope = {"torch": torch, "model": model.eval(), "tokenizer": tokenizer, "sentences": SENTENCES}
    exec(VECTORS, scope)
    return scope["vectors"]


def test_loads_with_the_package_to_the_saved_vectors(one_thread):
    np.testing.assert_allclose(vectors_with_the_package().numpy(), np.load(EXPECTED), rtol=0, atol=1e-6)


def test_the_code_it_carries_gives_the_package_s_vectors_bit_for_bit(tmp_path, one_thread):
    code = f"""
import json, sys
sys.modules["elmo_hf"] = None  # any import of the package fails: only the checkpoint's own code can run
import numpy as np, torch
from transformers import AutoModel, AutoTokenizer
path = {str(CHECKPOINT)!r}
model = AutoModel.from_pretrained(path, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
sentences = json.loads({json.dumps(SENTENCES)!r})
{VECTORS}
np.save({str(tmp_path / "remote.npy")!r}, vectors.numpy())
print("remote code ok", type(model).__module__, type(tokenizer).__module__)
"""
    result = run_offline_without_repository(code, pathlib.Path(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "remote code ok transformers_modules" in result.stdout
    assert result.stdout.split()[-1].startswith("transformers_modules"), result.stdout
    remote = np.load(tmp_path / "remote.npy")
    assert np.array_equal(vectors_with_the_package().numpy(), remote)
    np.testing.assert_allclose(remote, np.load(EXPECTED), rtol=0, atol=1e-6)
