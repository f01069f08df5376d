"""The reference fixtures vendored in tests/fixtures are byte for byte the source of truth, ../shared/fixtures.

tests/fixtures/SHA256SUMS (`sha256sum -c` reads it) lists every vendored file. Wherever ../shared/fixtures exists (CI
here), every file there must be vendored with the same sha256, and nothing else but the vendored copy's LICENSE and
NOTICE; in a fresh clone without it, the vendored files are checked against the list.
"""

import hashlib

from helpers import SHARED_FIXTURES, VENDORED_FIXTURES

MANIFEST = VENDORED_FIXTURES / "SHA256SUMS"
VENDORING_ONLY = {"LICENSE", "NOTICE"}  # the licence text and attribution that come with the copy


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files_under(folder, leave_out=()):
    return {
        str(path.relative_to(folder)): path for path in folder.rglob("*") if path.is_file() and path not in leave_out
    }


def listed_digests():
    lines = MANIFEST.read_text(encoding="utf-8").splitlines()
    return {name: digest for digest, name in (line.split(maxsplit=1) for line in lines)}


def test_every_vendored_file_is_listed_with_its_sha256():
    listed = listed_digests()
    vendored = files_under(VENDORED_FIXTURES, leave_out={MANIFEST})
    assert sorted(vendored) == sorted(listed)
    changed = [name for name, path in vendored.items() if sha256(path) != listed[name]]
    assert not changed, f"vendored fixtures differ from tests/fixtures/SHA256SUMS: {changed}"
    assert VENDORING_ONLY <= set(listed)


def test_the_vendored_copy_equals_the_shared_fixtures_where_they_exist():
    """../shared/fixtures is the truth: the same files, the same bytes (checked only where that folder exists)."""
    listed = listed_digests()
    if not (SHARED_FIXTURES / "README.md").is_file():
        assert (VENDORED_FIXTURES / "README.md").is_file()  # a fresh clone: the vendored copy stands alone
        return
    shared = files_under(SHARED_FIXTURES)
    assert sorted(shared) == sorted(set(listed) - VENDORING_ONLY), "refresh tests/fixtures from ../shared/fixtures"
    different = [name for name, path in shared.items() if sha256(path) != listed[name]]
    assert not different, f"tests/fixtures differs from ../shared/fixtures: {different} (copy them, then SHA256SUMS)"
