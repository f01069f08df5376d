"""How much better a model predicts the text it was trained on than held-out text of the same source: the stateless
perplexity of a seeded random sample of each source's training sentences and of its validation sentences, from an
`elmo-hf build-corpus` output.

    python tools/train_heldout_gap.py --corpus outputs/corpus --sentences 1500 --output gap.json

Sources trained at a share below 1 (`elmo_hf.corpus_builder.MIXES`) were trained on only part of their training split,
so part of their training sample was never seen. About 15 minutes on one thread for the default model.
"""

import argparse
import json
import random

from elmo_hf import DEFAULT_MODEL
from elmo_hf.corpus_builder import SOURCES
from elmo_hf.perplexity import evaluate_perplexity, load_language_model, read_sentences


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--corpus", default="outputs/corpus")
    parser.add_argument("--sentences", type=int, default=1500, help="per source and split (seeded sample)")
    parser.add_argument("--output", help="write the JSON here too")
    args = parser.parse_args(argv)
    model, tokenizer, vocabulary = load_language_model(args.model)
    results = {}
    for source in SOURCES:
        row = {}
        for split in ("train", "valid"):
            sentences = read_sentences(f"{args.corpus}/{source}/{split}.txt")
            sentences = random.Random(0).sample(sentences, min(args.sentences, len(sentences)))
            row[split] = evaluate_perplexity(model, tokenizer, vocabulary, sentences, "stateless", 64)["perplexity"]
        row["gap"] = row["valid"] / row["train"] - 1
        results[source] = row
        print(json.dumps({"source": source, **{key: round(value, 4) for key, value in row.items()}}), flush=True)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as out:
            json.dump({"model": args.model, "sentences": args.sentences, "sources": results}, out, indent=1)


if __name__ == "__main__":
    main()
