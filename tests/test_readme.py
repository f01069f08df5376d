"""The README's Python quick start runs as written, and its size stays what a newcomer reads in five minutes."""

import re
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_quick_start_runs_as_written():
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, f"expected one python block in the README's quick start, found {len(blocks)}"
    namespace = {}
    exec(compile(blocks[0], "README.md (quick start)", "exec"), namespace)
    projection_dim = namespace["model"].config.projection_dim
    assert len(namespace["out"].hidden_states) == namespace["model"].config.num_lstm_layers + 1
    vectors = namespace["embedder"].embed_sentences([["The", "cat", "sat", "."]], layers="average")[0]
    assert vectors.shape == (4, 2 * projection_dim)


def test_readme_is_short_and_links_documents_that_exist():
    assert len(README.splitlines()) <= 200
    root = Path(__file__).resolve().parent.parent
    linked = set(re.findall(r"`((?:docs|examples|benchmarks)/[\w./-]+\.md)`", README))
    assert linked, "the README links no documents"
    missing = sorted(path for path in linked if not (root / path).is_file())
    assert not missing, f"the README links documents that do not exist: {missing}"
