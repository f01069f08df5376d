"""Convert the four published English ELMo models from their original files in one folder, and optionally
publish them to the Hub under consistent names.

    python conversion/convert_all_published.py --input-dir elmo_files --output-dir converted \
        [--push-to-hub-namespace ORG [--private] [--revision BRANCH]] [--models small original]

The input folder holds the files under their published names, `<stem>_options.json` and `<stem>_weights.hdf5`
(stems below). Each model is converted and verified by `elmo_hf.original_tf.convert_hdf5` into
`<output-dir>/<repo name>`, with its model card, and pushed to `<ORG>/<repo name>` when a namespace is given.
Missing files are reported before anything is converted.
"""

import argparse
import os
import sys
from dataclasses import dataclass

from elmo_hf.cli import add_hub_arguments
from elmo_hf.original_tf import check_repo_id, convert_hdf5, push_to_hub
from elmo_hf.user_errors import UserInputError, add_debug_argument, reported_as_one_line

ONE_BILLION_WORDS = (
    "The 1 Billion Word Language Model Benchmark (Chelba et al., 2013), about 800 million tokens of news text."
)


@dataclass(frozen=True)
class PublishedModel:
    name: str  # the size's short name, used by --models
    stem: str  # the published file names without "_options.json" / "_weights.hdf5"
    repo_name: str
    training_data: str
    datasets: tuple  # Hub dataset ids for the card's metadata

    def files(self, input_dir):
        return (
            os.path.join(input_dir, f"{self.stem}_options.json"),
            os.path.join(input_dir, f"{self.stem}_weights.hdf5"),
        )


PUBLISHED_MODELS = (
    PublishedModel("small", "elmo_2x1024_128_2048cnn_1xhighway", "elmo-small", ONE_BILLION_WORDS, ("lm1b",)),
    PublishedModel("medium", "elmo_2x2048_256_2048cnn_1xhighway", "elmo-medium", ONE_BILLION_WORDS, ("lm1b",)),
    PublishedModel("original", "elmo_2x4096_512_2048cnn_2xhighway", "elmo-original", ONE_BILLION_WORDS, ("lm1b",)),
    PublishedModel(
        "original-5.5B",
        "elmo_2x4096_512_2048cnn_2xhighway_5.5B",
        "elmo-original-5.5b",
        "5.5 billion tokens: Wikipedia (1.9 billion) and the monolingual news crawl data of WMT 2008-2012 "
        "(3.6 billion).",
        (),
    ),
)


def convert_all(input_dir, output_dir, namespace=None, private=None, revision=None, names=None):
    """Convert (and push, when `namespace` is given) the published models named in `names` (all when None).
    Returns {model name: (output folder, repo id or None, conversion report)}."""
    selected = [model for model in PUBLISHED_MODELS if names is None or model.name in names]
    unknown = sorted(set(names or ()) - {model.name for model in PUBLISHED_MODELS})
    if unknown:
        known = [model.name for model in PUBLISHED_MODELS]
        raise UserInputError(f"--models: unknown model names {unknown}; known: {known}")
    missing = [path for model in selected for path in model.files(input_dir) if not os.path.isfile(path)]
    if missing:
        raise UserInputError(f"{input_dir}: missing published files {[os.path.basename(path) for path in missing]}")
    results = {}
    for model in selected:
        folder = os.path.join(output_dir, model.repo_name)
        repo_id = check_repo_id(f"{namespace}/{model.repo_name}") if namespace else None
        card_options = {
            "repo_id": repo_id or folder,
            "revision": revision if repo_id else None,
            "title": f"ELMo {model.name} ({model.stem})",
            "datasets": model.datasets,
            "training_data": model.training_data,
        }
        _, _, report = convert_hdf5(*model.files(input_dir), folder, card_options)
        if repo_id is not None:
            push_to_hub(folder, repo_id, private=private, revision=revision)
        print(f"{model.name}: saved to {folder}" + (f", pushed to {repo_id}" if repo_id else ""), file=sys.stderr)
        results[model.name] = (folder, repo_id, report)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input-dir", required=True, help="folder holding the published options/weights files")
    parser.add_argument("--output-dir", required=True, help="one checkpoint folder per model is written here")
    parser.add_argument("--push-to-hub-namespace", metavar="ORG", help="push each model to ORG/<repo name>")
    parser.add_argument(
        "--models",
        nargs="+",
        choices=[model.name for model in PUBLISHED_MODELS],
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
