"""tools/transformers_matrix.sh's arguments (its runs themselves build venvs: docs/guarantees.md, "Supported
releases")."""

import subprocess

import pytest
from helpers import REPO_ROOT

SCRIPT = REPO_ROOT / "tools" / "transformers_matrix.sh"


@pytest.mark.parametrize(
    "arguments, message",
    [
        ([], "usage: "),
        (["--spacy", "3.7.0"], "usage: "),
        (["5.10.1", "--keep-going"], "error: --keep-going: unknown argument"),
    ],
)
def test_bad_arguments_are_refused_before_any_install(arguments, message, tmp_path):
    result = subprocess.run(
        ["bash", str(SCRIPT), *arguments],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)},
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not list(tmp_path.iterdir())  # no venv was started
