"""A held-out domain corpus for fine-tuning the default model: the quotations, jokes and verse of Debian's
`fortunes` package, written in the Penn Treebank language-model style the default model was trained on.

    apt-get download fortunes && dpkg-deb -x fortunes_*.deb fortunes-deb
    python examples/prepare_fortunes_corpus.py fortunes-deb/usr/share/games/fortunes outputs/fortunes \
        --vocab-file PTB_MODEL/vocab.txt   # the vocab.txt of a model trained on the Penn Treebank text

Each fortune (the text between two `%` lines) is cut into sentences at `.`, `!` and `?`; a sentence is
lowercased, split into words with PTB's contractions (`do n't`, `it 's`), numbers become `N`, other punctuation
is dropped, and, given `--vocab-file`, words outside the vocabulary become `<unk>` (as in the PTB text).
Sentences of fewer than 3 words are dropped. Fortunes are assigned to splits by position in each file: the
10th, 20th, ... go to test.txt, the 11th, 21st, ... to valid.txt, the rest to train.txt.
"""

import argparse
import os
import re
import sys

SKIPPED_FILES = {"ascii-art", "translate-me"}  # pictures, and text in other languages
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
WORD = re.compile(r"[a-z]+(?:'[a-z]+)?|\d[\d.,:/-]*")
CONTRACTION = re.compile(r"(n't|'s|'re|'ve|'ll|'d|'m)$")


def fortunes(directory):
    """Yields (file name, position in the file, text) for every fortune of every text file in `directory`."""
    names = sorted(
        name
        for name in os.listdir(directory)
        if "." not in name and name not in SKIPPED_FILES and os.path.isfile(os.path.join(directory, name))
    )
    if not names:
        raise ValueError(f"{directory} holds no fortune files (expected files such as 'computers', 'literature')")
    for name in names:
        with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as source:
            text = source.read()
        for position, fortune in enumerate(re.split(r"^%\s*$", text, flags=re.MULTILINE)):
            if fortune.strip():
                yield name, position, " ".join(fortune.split())


def ptb_words(sentence, vocabulary=None):
    """PTB-style words of one sentence: lowercase, contractions split, numbers as N, no punctuation."""
    words = []
    for token in WORD.findall(sentence.lower()):
        if token[0].isdigit():
            words.append("N")
            continue
        contraction = CONTRACTION.search(token)
        if contraction and contraction.start() > 0:
            words.extend([token[: contraction.start()], contraction.group(1)])
        else:
            words.append(token)
    if vocabulary is not None:
        words = [word if word in vocabulary else "<unk>" for word in words]
    return words


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fortunes_dir", help="the extracted package's usr/share/games/fortunes")
    parser.add_argument("output_dir", help="where train.txt, valid.txt and test.txt are written")
    parser.add_argument("--vocab-file", help="a bilm-tf vocab.txt: other words become <unk>")
    args = parser.parse_args(argv)

    vocabulary = None
    if args.vocab_file is not None:
        with open(args.vocab_file, encoding="utf-8") as vocab:
            vocabulary = {line.strip() for line in vocab if line.strip()}
    splits = {"train": [], "valid": [], "test": []}
    for _, position, fortune in fortunes(args.fortunes_dir):
        split = {0: "test", 1: "valid"}.get(position % 10, "train") if position >= 10 else "train"
        for sentence in SENTENCE_END.split(fortune):
            words = ptb_words(sentence, vocabulary)
            if len(words) >= 3:
                splits[split].append(" ".join(words))
    os.makedirs(args.output_dir, exist_ok=True)
    for split, sentences in splits.items():
        with open(os.path.join(args.output_dir, f"{split}.txt"), "w", encoding="utf-8") as out:
            out.write("".join(sentence + "\n" for sentence in sentences))
        words = sum(len(sentence.split()) for sentence in sentences)
        print(f"{split}: {len(sentences)} sentences, {words} words", file=sys.stderr)


if __name__ == "__main__":
    main()
