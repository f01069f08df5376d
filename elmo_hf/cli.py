"""The `elmo-hf` command line: embed text files, convert original checkpoints, measure perplexity."""

import argparse
import contextlib
import runpy
import sys
from pathlib import Path

import torch
import transformers

from . import DEFAULT_MODEL

PERPLEXITY_SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "evaluate_perplexity.py"
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}

EMBED_DESCRIPTION = """\
Write the ELMo vectors of every line of INPUT to OUTPUT, without the <S>/</S> positions: one dataset
per line, named by its index ("0", "1", ...), plus sentence_to_index, a JSON object from each line to
its index (the layout of allennlp's `elmo` command).

Memory stays bounded whatever the size of INPUT. OUTPUT appears only once it is complete; until then
the finished chunks sit in OUTPUT.partial/, and --resume continues from them.
"""
EMBED_EXAMPLES = """\
examples:
  elmo-hf embed sentences.txt vectors.hdf5 --model ./elmo-original
  elmo-hf embed corpus.txt vectors.npz --model ./elmo-original --tokenize --layers average
  elmo-hf embed corpus.txt vectors.hdf5 --model ./elmo-original --sentence-vectors --layers mix --mix-weights 0.2 0.3 0.5
  elmo-hf embed corpus.txt vectors.hdf5 --model ./elmo-original --resume   # after an interrupted run

reading the output in Python:
  with h5py.File("vectors.hdf5", "r") as f:
      first = f["0"][...]                            # line 0: (layers, words, dim) with --layers all
      index = json.loads(f["sentence_to_index"][0])  # {line text: "line index"}
  first = numpy.load("vectors.npz")["0"]
"""


def build_parser():
    parser = argparse.ArgumentParser(
        prog="elmo-hf",
        description="ELMo (Peters et al., 2018) on Hugging Face: contextual word vectors from the command line.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    embed = commands.add_parser(
        "embed",
        help="write the ELMo vectors of a text file (one sentence per line) to .hdf5 or .npz",
        description=EMBED_DESCRIPTION,
        epilog=EMBED_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    embed.add_argument("input", metavar="INPUT", help="UTF-8 text, one sentence per line, no empty lines")
    embed.add_argument("output", metavar="OUTPUT", help="the file to write: OUTPUT.hdf5 (or .h5) or OUTPUT.npz")
    model = embed.add_argument_group("model")
    model.add_argument(
        "--model",
        metavar="NAME_OR_DIR",
        default=DEFAULT_MODEL,
        help="a converted checkpoint folder (see `elmo-hf convert`) or a Hub model name (default: the small "
        "English ELMo shipped in the package, elmo_hf.DEFAULT_MODEL)",
    )
    model.add_argument(
        "--device", default=None, help="where to run, e.g. cpu, cuda, cuda:1 (default: cuda when available, else cpu)"
    )
    model.add_argument("--dtype", choices=DTYPES, default="float32", help="compute dtype; vectors are saved as float32")
    vectors = embed.add_argument_group("what to write")
    vectors.add_argument(
        "--tokenize", action="store_true", help="split raw text into words and punctuation (default: split on spaces)"
    )
    vectors.add_argument(
        "--layers",
        choices=["all", "top", "average", "mix"],
        default="all",
        help="all: every layer, (layers, words, dim) per line; top: the last LSTM layer; average: the mean of the "
        "layers; mix: their sum weighted by --mix-weights. All but `all` give (words, dim). Default: all",
    )
    vectors.add_argument(
        "--mix-weights",
        metavar="W",
        type=float,
        nargs="+",
        help="with --layers mix: one weight per layer (token layer first), used as given",
    )
    vectors.add_argument(
        "--sentence-vectors", action="store_true", help="average over the words: one vector per line"
    )
    speed = embed.add_argument_group("speed and memory")
    speed.add_argument("--batch-size", type=int, default=64, help="sentences per model call at most (default: 64)")
    speed.add_argument(
        "--max-tokens-per-batch",
        type=int,
        help="padded words per model call at most (sentences x longest length); caps memory on long lines",
    )
    speed.add_argument(
        "--token-cache",
        metavar="VOCAB",
        help="a file with one word per line: their character-CNN vectors are computed once and looked up (faster, "
        "same vectors); other words are computed as usual",
    )
    speed.add_argument(
        "--chunk-size",
        type=int,
        default=1000,
        help="lines embedded and saved together; the memory held and the work a --resume may redo (default: 1000)",
    )
    run = embed.add_argument_group("run")
    run.add_argument(
        "--resume", action="store_true", help="continue the unfinished run in OUTPUT.partial/ (same settings)"
    )
    run.add_argument("--quiet", action="store_true", help="no progress bar and no summary")

    export = commands.add_parser(
        "export-onnx",
        help="export the biLM to ONNX: every layer out, dynamic batch and word axes (see elmo_hf/onnx_export.py)",
    )
    export.add_argument("--model", metavar="NAME_OR_DIR", default=DEFAULT_MODEL, help="as for embed")
    export.add_argument("--output", metavar="DIR", required=True, help="folder for model.onnx, config and tokenizer")
    export.add_argument("--opset", type=int, default=17, help="ONNX opset, 13..20 (default: 17)")

    commands.add_parser(
        "convert",
        help="convert the original bilm-tf weights (options.json + .hdf5) to a checkpoint folder; "
        "`elmo-hf convert --help` for its options",
        add_help=False,
    )
    commands.add_parser(
        "perplexity",
        help="the biLM's perplexity on a text file (examples/evaluate_perplexity.py); "
        "`elmo-hf perplexity --help` for its options",
        add_help=False,
    )
    return parser


@contextlib.contextmanager
def _arguments(program, argv):
    """Run a delegated command with sys.argv set to `[program, *argv]`."""
    saved = sys.argv
    sys.argv = [program, *argv]
    try:
        yield
    finally:
        sys.argv = saved


def convert(argv):
    from conversion.convert_elmo_original_tf_to_hf import main as convert_main

    with _arguments("elmo-hf convert", argv):  # its usage lines then say `elmo-hf convert`
        convert_main(argv)


def perplexity(argv):
    if not PERPLEXITY_SCRIPT.is_file():
        raise SystemExit(
            f"elmo-hf perplexity runs {PERPLEXITY_SCRIPT}, which does not exist: the script ships with a source "
            "checkout of elmo-hf (git clone), not with the installed package"
        )
    with _arguments(str(PERPLEXITY_SCRIPT), argv):  # as if the script were run directly
        runpy.run_path(str(PERPLEXITY_SCRIPT), run_name="__main__")


def embed(args):
    from .embedder import ElmoEmbedder

    if args.quiet:
        transformers.utils.logging.disable_progress_bar()  # the "Loading weights" bar
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    embedder = ElmoEmbedder.from_pretrained(args.model, device=device, dtype=DTYPES[args.dtype])
    if args.token_cache:
        with open(args.token_cache, encoding="utf-8") as vocabulary:
            embedder.set_token_cache(word for word in (line.strip() for line in vocabulary) if word)
    summary = embedder.embed_file(
        args.input,
        args.output,
        tokenize=args.tokenize,
        layers=args.layers,
        mix_weights=args.mix_weights,
        sentence_vectors=args.sentence_vectors,
        batch_size=args.batch_size,
        max_tokens_per_batch=args.max_tokens_per_batch,
        chunk_size=args.chunk_size,
        resume=args.resume,
        progress=not args.quiet,
    )
    if not args.quiet:
        print(
            f"embedded {summary['sentences']:,} sentences ({summary['tokens']:,} tokens) in {summary['seconds']:.1f} s; "
            f"wrote {args.output}",
            file=sys.stderr,
        )


def export_onnx(args):
    from .modeling_elmo import ElmoModel
    from .onnx_export import export_onnx

    print(f"wrote {export_onnx(ElmoModel.from_pretrained(args.model), args.output, opset=args.opset)}", file=sys.stderr)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    # convert and perplexity parse their own options.
    delegated = {"convert": convert, "perplexity": perplexity}
    if argv and argv[0] in delegated:
        return delegated[argv[0]](argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return export_onnx(args) if args.command == "export-onnx" else embed(args)
    except (ValueError, FileExistsError) as error:  # bad input or settings: a message, not a traceback
        parser.exit(2, f"elmo-hf {args.command}: error: {error}\n")


if __name__ == "__main__":
    main()
