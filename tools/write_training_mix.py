"""Writes a source mix of the `build-corpus` corpus as the biLM's training and validation text, after checking that the
corpus is the one `elmo_hf/corpus_manifest.json` describes (a corpus built earlier, by other code, would give other
batches: a resumed run would not continue the same one).

    python tools/write_training_mix.py outputs/corpus lessreligious outputs/default-bilm-mix

MIX is a name of `elmo_hf.corpus_builder.MIXES`. Prints the mix's summary (words and sentences per source).
"""

import argparse
import json
import os
import sys

import elmo_hf
from elmo_hf.corpus_builder import MIXES, manifest_differences, write_mix


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", help="the folder `elmo-hf build-corpus` wrote")
    parser.add_argument("mix", choices=sorted(MIXES))
    parser.add_argument("output", help="gets train.txt and valid.txt")
    args = parser.parse_args(argv)
    with open(os.path.join(os.path.dirname(elmo_hf.__file__), "corpus_manifest.json"), encoding="utf-8") as shipped:
        with open(os.path.join(args.corpus, "manifest.json"), encoding="utf-8") as built:
            differences = manifest_differences(json.load(shipped), json.load(built))
    if differences:
        sys.exit(
            f"{args.corpus} is not the corpus of elmo_hf/corpus_manifest.json (rebuild it): " + "; ".join(differences)
        )
    print(write_mix(args.corpus, MIXES[args.mix], args.output))


if __name__ == "__main__":
    main()
