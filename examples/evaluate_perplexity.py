"""Perplexity of an ELMo language model (a checkpoint converted from a bilm-tf training checkpoint); the same as
`elmo-hf perplexity`.

    python examples/evaluate_perplexity.py [--model elmo-lm] --text heldout.txt [--protocol bilm-tf|stateless] \
        [--batch-size N] [--json]

Without --model: the model shipped in the package (elmo_hf.DEFAULT_MODEL). The protocols and the targets are
described in `elmo_hf/inference/perplexity.py`, which does the work.
"""

from elmo_hf.cli import PERPLEXITY_DESCRIPTION, script_main


def main(argv=None):
    script_main("perplexity", PERPLEXITY_DESCRIPTION, argv)


if __name__ == "__main__":
    main()
