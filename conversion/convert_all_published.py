"""Convert the four published English ELMo models from their original files in one folder, and optionally
publish them to the Hub under consistent names.

    python conversion/convert_all_published.py --input-dir elmo_files --output-dir converted \
        [--push-to-hub-namespace ORG [--private] [--revision BRANCH]] [--models small original]

The input folder holds the files under their published names, `<stem>_options.json` and `<stem>_weights.hdf5`
(listed in `elmo_hf.convert.published.PUBLISHED_MODELS`, which does the work). Each model is converted and verified into
`<output-dir>/<repo name>`, with its model card, and pushed to `<ORG>/<repo name>` when a namespace is given.
Missing files are reported before anything is converted. To download and convert one model by name instead:
`elmo-hf convert --published NAME`.
"""

import argparse

from elmo_hf.cli import add_hub_arguments
from elmo_hf.convert.published import ENGLISH_MODELS, convert_all
from elmo_hf.user_errors import add_debug_argument, reported_as_one_line

__all__ = ["convert_all", "main"]  # convert_all: imported by the tests from here too


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input-dir", required=True, help="folder holding the published options/weights files")
    parser.add_argument("--output-dir", required=True, help="one checkpoint folder per model is written here")
    parser.add_argument("--push-to-hub-namespace", metavar="ORG", help="push each model to ORG/<repo name>")
    parser.add_argument(
        "--models",
        nargs="+",
        choices=ENGLISH_MODELS,
        help="convert only these sizes (default: all four)",
    )
    add_hub_arguments(parser)
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    with reported_as_one_line(args.debug):
        convert_all(
            args.input_dir,
            args.output_dir,
            args.push_to_hub_namespace,
            private=args.private or None,
            revision=args.revision,
            names=args.models,
        )


if __name__ == "__main__":
    main()
