"""Writes a source mix of the corpus `build_corpus.py` wrote as the biLM's training and validation text, after checking
that the corpus is the one `corpus_manifest.json` (beside this script) describes (a corpus built earlier, by other
code, would give other batches: a resumed run would not continue the same one).

    python recipes/english-bilm/write_training_mix.py outputs/corpus lessreligious outputs/default-bilm-mix

MIX is a name of `build_corpus.MIXES`. Prints the mix's summary (words and sentences per source).
"""

import argparse
import json
import os
import sys

from build_corpus import MIXES, SHIPPED_MANIFEST, manifest_differences, write_mix  # beside this script


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", help="the folder build_corpus.py wrote")
    parser.add_argument("mix", choices=sorted(MIXES))
    parser.add_argument("output", help="gets train.txt and valid.txt")
    args = parser.parse_args(argv)
    with open(SHIPPED_MANIFEST, encoding="utf-8") as shipped:
        with open(os.path.join(args.corpus, "manifest.json"), encoding="utf-8") as built:
            differences = manifest_differences(json.load(shipped), json.load(built))
    if differences:
        sys.exit(f"{args.corpus} is not the corpus of {SHIPPED_MANIFEST} (rebuild it): " + "; ".join(differences))
    print(write_mix(args.corpus, MIXES[args.mix], args.output))


if __name__ == "__main__":
    main()
