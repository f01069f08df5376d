"""benchmarks/results/ holds exactly the logs the documents cite: every `benchmarks/results/...` path named in the
README, docs/, benchmarks/RESULTS.md or a shipped model's card exists, and every file there is named by one of them."""

import itertools
import re

from helpers import REPO_ROOT

RESULTS = REPO_ROOT / "benchmarks" / "results"
# The documents that cite logs, and how each names them: RESULTS.md relative to benchmarks/ (`results/NAME`).
DOCUMENTS = [
    "README.md",
    "benchmarks/RESULTS.md",
    "benchmarks/README.md",
    *(f"docs/{p.name}" for p in (REPO_ROOT / "docs").glob("*.md")),
]
DOCUMENTS += [p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "elmo_hf" / "pretrained").glob("*/README.md")]
CITATION = re.compile(r"(?<![\w/.-])(?:benchmarks/)?results/(\d[\w.{},*-]*[\w}*])")  # logs are named by date


def expand(pattern):
    """`a-{b,c}.{log,json}` -> the four names; `*` stays a glob."""
    parts = re.split(r"\{([^{}]*)\}", pattern)
    choices = [part.split(",") if index % 2 else [part] for index, part in enumerate(parts)]
    return ["".join(combination) for combination in itertools.product(*choices)]


def cited():
    """{pattern: the document that names it} over every document."""
    found = {}
    for document in DOCUMENTS:
        text = (REPO_ROOT / document).read_text(encoding="utf-8")
        for match in CITATION.finditer(text):
            for name in expand(match.group(1)):
                found.setdefault(name, document)
    return found


def test_every_cited_log_exists():
    missing = sorted(f"{name} ({document})" for name, document in cited().items() if not list(RESULTS.glob(name)))
    assert not missing, f"documents cite logs that are not in benchmarks/results/: {missing}"


def test_every_log_is_cited():
    patterns = list(cited())
    assert len(patterns) > 10
    files = {path.name for path in RESULTS.iterdir() if path.is_file()}
    named = {path.name for pattern in patterns for path in RESULTS.glob(pattern)}
    assert not sorted(files - named), "logs in benchmarks/results/ that no document cites (git keeps them: remove)"
