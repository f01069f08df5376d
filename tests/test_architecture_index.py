"""docs/architecture.md indexes every script of benchmarks/, tools/, conversion/ and recipes/, one line each, and names
none that is gone."""

import re

from helpers import REPO_ROOT

SECTION = "## Index of the scripts in `benchmarks/`, `tools/`, `conversion/` and `recipes/`"
FOLDERS = ("benchmarks", "tools", "conversion", "recipes")
SCRIPT_SUFFIXES = (".py", ".sh")


def indexed_scripts():
    """{path: what it is for} from the index's table rows."""
    text = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert SECTION in text, f"docs/architecture.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = re.findall(rf"^\| `((?:{'|'.join(FOLDERS)})/[^`]+)` \| (.*) \|$", section, flags=re.MULTILINE)
    return dict(rows)


def scripts_on_disk():
    return {
        path.relative_to(REPO_ROOT).as_posix()
        for folder in FOLDERS
        for path in (REPO_ROOT / folder).rglob("*")
        if path.is_file()
        and path.suffix in SCRIPT_SUFFIXES
        and path.name != "__init__.py"
        and "__pycache__" not in path.parts
    }


def test_every_script_is_in_the_index():
    index, scripts = indexed_scripts(), scripts_on_disk()
    assert len(scripts) > 20
    assert not sorted(scripts - set(index)), "scripts missing from the index of docs/architecture.md"
    assert not sorted(set(index) - scripts), "the index of docs/architecture.md names scripts that do not exist"
    assert all(len(purpose.split()) >= 5 for purpose in index.values()), "each line says what the script is for"
