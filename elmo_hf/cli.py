"""The `elmo-hf` command line: embed text files, convert original checkpoints, measure perplexity.

A mistake in the input (a missing or corrupt file, contradictory options) is one line on stderr,
`error: <file or argument>: <what is wrong, what was expected>`, and exit status 2; so is an output that cannot be
written (a full disk, a read-only folder: `error: <path>: cannot be written: <what happened>; <what to do>`), which
leaves no half-written output. Ctrl-C and SIGTERM end in one line that says how to continue. `--debug` shows the
traceback. Any other exception is a bug and keeps its traceback.

The parser is built, and the arguments checked, before torch or transformers is imported: each command imports
what it runs (see elmo_hf/__init__.py for the Auto registration this process defers).
"""

import argparse
import contextlib
import json
import os
import sys

from .convert.published import BASE_URL_VARIABLE, PUBLISHED_MODELS, convert_published, published_model
from .hub.shipped_models import DEFAULT_MODEL, shipped_model_path
from .user_errors import (
    UserInputError,
    add_debug_argument,
    interrupts_reported,
    reported_as_one_line,
    unloadable_model_error,
)

DTYPES = ("float32", "float16", "bfloat16")  # --dtype: torch dtypes by name
PROTOCOLS = ("bilm-tf", "stateless")  # perplexity.PROTOCOLS, named here so that the parser needs no torch

EMBED_DESCRIPTION = """\
Write the ELMo vectors of every line of INPUT to OUTPUT, without the <S>/</S> positions: one dataset
per line, named by its index ("0", "1", ...), plus sentence_to_index, a JSON object from each line to
its index (the layout of allennlp's `elmo` command).

Memory stays bounded whatever the size of INPUT. OUTPUT appears only once it is complete; until then
the finished chunks sit in OUTPUT.partial/, and --resume continues from them.

Under torchrun or accelerate launch, the processes (one per GPU or CPU socket) share the chunks and
write them into the same OUTPUT.partial/, which they must all see; the first process then assembles
OUTPUT. A run may be resumed with any number of processes.
"""
EMBED_EXAMPLES = """\
examples:
  elmo-hf embed sentences.txt vectors.hdf5 --model ./elmo-original
  elmo-hf embed corpus.txt vectors.npz --model ./elmo-original --tokenize --layers average
  elmo-hf embed corpus.txt vectors.hdf5 --sentence-vectors --layers mix --mix-weights 0.2 0.3 0.5
  elmo-hf embed corpus.txt vectors.hdf5 --model ./elmo-original --resume   # after an interrupted run
  torchrun --nproc_per_node 2 -m elmo_hf.cli embed corpus.txt vectors.hdf5 --model ./elmo-original
  elmo-hf embed sentences.txt elmo_layers.hdf5 --all --options-file options.json --weight-file weights.hdf5
      # allennlp 0.9's `allennlp elmo` flags: --all/--top/--average, --batch-size, --cuda-device,
      # --forget-sentences, --use-sentence-keys, --options-file/--weight-file (converted once, then cached)

reading the output in Python:
  with h5py.File("vectors.hdf5", "r") as f:
      first = f["0"][...]                            # line 0: (layers, words, dim) with --layers all
      index = json.loads(f["sentence_to_index"][0])  # {line text: "line index"}
  first = numpy.load("vectors.npz")["0"]
"""

CONVERT_DESCRIPTION = """\
Convert the original ELMo (bilm-tf) to a checkpoint folder: options.json with the published weights .hdf5,
or with a training checkpoint (--tf-checkpoint, softmax included, plus --vocab). No TensorFlow is needed; the
converted model is compared with bilm-tf's arithmetic before anything is written.

--published NAME downloads a model that allennlp published (options and weights) and converts it; an interrupted
download resumes when the command runs again. NAME is one of: {published}.

--elmoformanylangs DIR converts an ELMoForManyLangs model folder (config.json, char.dic, word.dic,
token_embedder.pkl, encoder.pkl); it is compared with ELMoForManyLangs' arithmetic before anything is written.
"""
PERPLEXITY_DESCRIPTION = """\
The perplexity of an ELMo language model (ElmoForPreTraining) on a text, one sentence per line: bilm-tf's
stateful protocol (the text as one stream; results depend on --batch-size) or stateless (every sentence alone).
"""


def build_parser():
    parser = argparse.ArgumentParser(
        prog="elmo-hf",
        description="ELMo (Peters et al., 2018) on Hugging Face: contextual word vectors from the command line.",
        epilog="A mistake in the input (a missing or corrupt file, contradictory options) prints one line, "
        "error: <file>: <what is wrong, what was expected>, and exits with status 2; every command takes --debug "
        "to show its traceback.",
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
        help="a converted checkpoint folder (see `elmo-hf convert`), a Hub model name, or a model shipped in the "
        "package by name: elmo-english-small (the default, elmo_hf.DEFAULT_MODEL)",
    )
    model.add_argument(
        "--device",
        default=None,
        help="where to run, e.g. cpu, cuda, cuda:1 (default: cuda when available, else cpu; under torchrun or "
        "accelerate launch, cuda:LOCAL_RANK)",
    )
    model.add_argument(
        "--cuda-device",
        type=int,
        metavar="N",
        help="as allennlp's `elmo` command: the GPU to run on, -1 for the CPU (instead of --device)",
    )
    model.add_argument(
        "--options-file",
        help="as allennlp's `elmo` command: the published options.json (path or URL), with --weight-file, instead "
        "of --model; converted on first use and cached (see elmo_hf.compat.allennlp)",
    )
    model.add_argument("--weight-file", help="the published weights .hdf5 (path or URL), with --options-file")
    model.add_argument(
        "--dtype",
        choices=DTYPES,
        default="float32",
        help="compute dtype; vectors are saved as float32 (bfloat16 is faster only on CPUs with bfloat16 products: "
        "docs/speed.md)",
    )
    model.add_argument(
        "--quantize",
        choices=["int8"],
        help="int8 weights for the LSTM and highways (CPU, float32): close to float32; its gain depends on the CPU "
        "(docs/speed.md)",
    )
    vectors = embed.add_argument_group("what to write")
    vectors.add_argument(
        "--tokenize", action="store_true", help="split raw text into words and punctuation (default: split on spaces)"
    )
    layer_choice = vectors.add_mutually_exclusive_group()
    layer_choice.add_argument(
        "--layers",
        choices=["all", "top", "average", "mix"],
        default="all",
        help="all: every layer, (layers, words, dim) per line; top: the last LSTM layer; average: the mean of the "
        "layers; mix: their sum weighted by --mix-weights. All but `all` give (words, dim). Default: all",
    )
    for flag in ("all", "top", "average"):
        layer_choice.add_argument(
            f"--{flag}", dest="allennlp_layers", action="store_const", const=flag, help=f"the same as --layers {flag}"
        )
    vectors.add_argument(
        "--mix-weights",
        metavar="W",
        type=float,
        nargs="+",
        help="with --layers mix: one weight per layer (token layer first), used as given",
    )
    vectors.add_argument("--sentence-vectors", action="store_true", help="average over the words: one vector per line")
    vectors.add_argument(
        "--forget-sentences", action="store_true", help="as allennlp: leave out the sentence_to_index dataset"
    )
    vectors.add_argument(
        "--use-sentence-keys",
        action="store_true",
        help="as allennlp: name each line's dataset by the line itself, not its index (lines must be unique; no "
        "sentence_to_index)",
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
        help="export the biLM to ONNX: every layer out, dynamic batch and word axes "
        "(see elmo_hf/inference/onnx_export.py)",
    )
    export.add_argument("--model", metavar="NAME_OR_DIR", default=DEFAULT_MODEL, help="as for embed")
    export.add_argument("--output", metavar="DIR", required=True, help="folder for model.onnx, config and tokenizer")
    export.add_argument("--opset", type=int, default=17, help="ONNX opset, 13..20 (default: 17)")
    convert = commands.add_parser(
        "convert",
        help="convert the original bilm-tf weights (options.json + .hdf5, or a training checkpoint) to a "
        "checkpoint folder",
        description=CONVERT_DESCRIPTION.format(published=", ".join(model.name for model in PUBLISHED_MODELS)),
    )
    add_convert_arguments(convert)
    perplexity = commands.add_parser(
        "perplexity", help="the biLM's perplexity on a text file", description=PERPLEXITY_DESCRIPTION
    )
    add_perplexity_arguments(perplexity)
    for command in (embed, export, convert, perplexity):
        add_debug_argument(command)
    return parser


def add_convert_arguments(parser):
    parser.add_argument("--options", help="bilm-tf options.json (with --weights or --tf-checkpoint)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--weights", help="bilm-tf weights .hdf5 (the published format)")
    source.add_argument(
        "--published",
        metavar="NAME",
        help="download a published model's options and weights (see above) and convert them; the addresses can be "
        f"replaced with the environment variable {BASE_URL_VARIABLE}",
    )
    source.add_argument("--tf-checkpoint", help="bilm-tf training checkpoint prefix (e.g. model.ckpt-60)")
    source.add_argument("--elmoformanylangs", metavar="DIR", help="an ELMoForManyLangs model folder (see above)")
    parser.add_argument("--vocab", help="bilm-tf vocab.txt (with --tf-checkpoint, for the softmax)")
    parser.add_argument(
        "--output-dir", help="where to write the Hugging Face checkpoint (with --published, default: ./elmo-NAME)"
    )
    parser.add_argument(
        "--download-dir",
        metavar="DIR",
        help="with --published: where the downloads are kept and resumed (default: ~/.cache/elmo_hf/published)",
    )
    parser.add_argument("--push-to-hub", metavar="REPO_ID", help="also upload the checkpoint to this Hub repo")
    add_hub_arguments(parser)


def add_hub_arguments(parser):
    parser.add_argument("--private", action="store_true", help="create the Hub repo private (when it is new)")
    parser.add_argument("--revision", help="Hub branch to push to (created when missing); default: main")


def add_perplexity_arguments(parser):
    parser.add_argument(
        "--model", default=DEFAULT_MODEL, help="an ElmoForPreTraining checkpoint (default: elmo_hf.DEFAULT_MODEL)"
    )
    parser.add_argument("--text", required=True, help="one sentence per line, whitespace-tokenized")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="bilm-tf")
    parser.add_argument("--batch-size", type=int, default=1, help="rows (bilm-tf) or sentences per batch")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def convert(args):
    if args.published is not None:
        convert_published_model(args)
        return
    if args.elmoformanylangs is not None:
        convert_elmoformanylangs_model(args)
        return
    for name, value in (("--options", args.options), ("--output-dir", args.output_dir)):
        if value is None:
            raise UserInputError(f"{name}: required with --weights or --tf-checkpoint")
    if args.download_dir is not None:
        raise UserInputError("--download-dir: only applies to --published")
    if args.push_to_hub and args.tf_checkpoint is not None:
        raise UserInputError(
            "--push-to-hub: supported for --weights conversions only (the model card describes hdf5 sources)"
        )
    if args.vocab is not None and args.tf_checkpoint is None:
        raise UserInputError("--vocab: only applies to --tf-checkpoint (hdf5 files have no softmax)")
    _load_the_model_code()
    from .convert.convert_bilm_tf import convert_hdf5, convert_tf_checkpoint
    from .convert.convert_common import check_repo_id, push_to_hub

    repo_id = check_repo_id(args.push_to_hub) if args.push_to_hub else None
    if args.tf_checkpoint is not None:
        _, _, report = convert_tf_checkpoint(args.tf_checkpoint, args.options, args.vocab, args.output_dir)
        print(
            f"converted {report['variables_converted']} variables to {report['model_class']} "
            f"({report['variables_skipped']} optimizer/bookkeeping variables skipped); outputs match bilm-tf's "
            f"arithmetic to {report['verification_max_abs_difference']:.2e}; saved to {args.output_dir}",
            file=sys.stderr,
        )
        return
    card_options = {"repo_id": repo_id or args.output_dir, "revision": args.revision if repo_id else None}
    _, _, report = convert_hdf5(args.options, args.weights, args.output_dir, card_options)
    print(
        f"converted {report['datasets_converted']} datasets; outputs match bilm-tf's arithmetic to "
        f"{report['verification_max_abs_difference']:.2e}; saved to {args.output_dir}",
        file=sys.stderr,
    )
    if repo_id is not None:
        commit = push_to_hub(args.output_dir, repo_id, private=args.private or None, revision=args.revision)
        print(f"pushed to {repo_id}: {commit.commit_url}", file=sys.stderr)


def convert_elmoformanylangs_model(args):
    for name, value in (("--options", args.options), ("--vocab", args.vocab), ("--download-dir", args.download_dir)):
        if value is not None:
            raise UserInputError(f"{name}: does not apply to --elmoformanylangs (the model folder has everything)")
    if args.push_to_hub:
        raise UserInputError("--push-to-hub: not supported with --elmoformanylangs; push the converted folder")
    if args.output_dir is None:
        raise UserInputError("--output-dir: required with --elmoformanylangs")
    _load_the_model_code()
    from .convert.convert_elmoformanylangs import convert_efml

    _, _, report = convert_efml(args.elmoformanylangs, args.output_dir)
    print(
        f"converted {report['tensors_converted']} tensors of {args.elmoformanylangs}; outputs match ELMoForManyLangs' "
        f"arithmetic to {report['verification_max_abs_difference']:.2e}; saved to {args.output_dir}",
        file=sys.stderr,
    )


def convert_published_model(args):
    for name, value in (("--options", args.options), ("--vocab", args.vocab)):
        if value is not None:
            raise UserInputError(f"{name}: does not apply to --published (the published files are downloaded)")
    published_model(args.published)  # an unknown name is an argument error
    _load_the_model_code()
    output_dir, report = convert_published(
        args.published,
        args.output_dir,
        args.download_dir,
        repo_id=args.push_to_hub,
        private=args.private or None,
        revision=args.revision,
    )
    print(
        f"converted {report['datasets_converted']} datasets of {args.published}; outputs match bilm-tf's arithmetic "
        f"to {report['verification_max_abs_difference']:.2e}; saved to {output_dir}"
        + (f", pushed to {args.push_to_hub}" if args.push_to_hub else ""),
        file=sys.stderr,
    )


def perplexity(args):
    _load_the_model_code()
    from .inference.perplexity import evaluate_perplexity, load_language_model, read_sentences

    sentences = read_sentences(args.text)
    model, tokenizer, vocabulary = load_language_model(args.model)
    result = evaluate_perplexity(
        model, tokenizer, vocabulary, sentences, args.protocol, args.batch_size, show_progress=True
    )
    if args.json:
        print(json.dumps(result))
    else:
        print(f"protocol: {result['protocol']} (batch size {args.batch_size})")
        print(f"targets per direction: {result['targets_per_direction']}")
        print(f"forward perplexity:  {result['forward_perplexity']:.4f}")
        print(f"backward perplexity: {result['backward_perplexity']:.4f}")
        print(f"perplexity:          {result['perplexity']:.4f}")


@contextlib.contextmanager
def _process_group(device):
    """Join the torch.distributed group that torchrun or `accelerate launch` describe in the environment (gloo on
    a CPU, nccl on GPUs), for the duration of one command; nothing when started as a single process."""
    import torch
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) == 1 or dist.is_initialized():
        yield
        return
    dist.init_process_group(backend="nccl" if torch.device(device).type == "cuda" else "gloo")
    try:
        yield
        dist.barrier()  # every process is done with the group before any leaves it
    finally:
        dist.destroy_process_group()


def embed(args):
    for path, expected in ((args.input, "UTF-8 text, one sentence per line"), (args.token_cache, "one word per line")):
        if path is not None and not os.path.isfile(path):
            raise UserInputError(f"{path}: no such file; expected {expected}")
    _load_the_model_code()
    import torch
    import transformers

    if args.quiet:
        transformers.utils.logging.disable_progress_bar()  # the "Loading weights" bar
    device = args.device
    if args.cuda_device is not None:
        if device is not None:
            raise UserInputError("--cuda-device: give either --cuda-device or --device, not both")
        if args.cuda_device >= torch.cuda.device_count():
            raise UserInputError(
                f"--cuda-device: {args.cuda_device} is not available ({torch.cuda.device_count()} CUDA devices); "
                "-1 runs on the CPU"
            )
        device = "cpu" if args.cuda_device < 0 else f"cuda:{args.cuda_device}"
    if device is None:
        local_rank = os.environ.get("LOCAL_RANK")  # torchrun: one process per GPU
        device = "cpu" if not torch.cuda.is_available() else f"cuda:{local_rank}" if local_rank else "cuda"
    with _process_group(device):
        _embed(args, device)


def _embed(args, device):
    import torch
    import torch.distributed as dist

    from .compat.allennlp import embed_file_in_allennlp_layout, load_elmo_model
    from .inference.embedder import ElmoEmbedder

    if (args.options_file is None) != (args.weight_file is None):
        raise UserInputError("--options-file: goes with --weight-file (allennlp's pair of files); give both or neither")
    if args.options_file is not None and args.model != DEFAULT_MODEL:
        raise UserInputError("--options-file: give either --options-file and --weight-file, or --model, not both")
    try:
        if args.options_file is not None:
            model = load_elmo_model(args.options_file, args.weight_file)
            embedder = ElmoEmbedder(model, device=device, dtype=getattr(torch, args.dtype))
        else:
            embedder = ElmoEmbedder.from_pretrained(args.model, device=device, dtype=getattr(torch, args.dtype))
    except UserInputError:
        raise
    except (OSError, ValueError) as error:  # no such model, unreadable or contradictory files
        raise unloadable_model_error(args.model, error) from None
    if args.dtype == "bfloat16" and embedder.model.device.type == "cpu":  # slow without bfloat16 instructions
        from .model import cpu_kernels

        cpu_kernels.warn_if_bfloat16_is_slow(lambda line: print(f"warning: --dtype bfloat16: {line}", file=sys.stderr))
    if args.quantize is not None:
        try:
            embedder.model.quantize_weights(args.quantize)
        except ValueError as error:
            raise UserInputError(f"--quantize {args.quantize}: {error}") from None
    if args.token_cache:
        with open(args.token_cache, encoding="utf-8") as vocabulary:
            embedder.set_token_cache(word for word in (line.strip() for line in vocabulary) if word)
    try:
        summary = embed_file_in_allennlp_layout(
            embedder,
            args.input,
            args.output,
            forget_sentences=args.forget_sentences,
            use_sentence_keys=args.use_sentence_keys,
            tokenize=args.tokenize,
            layers=args.allennlp_layers or args.layers,
            mix_weights=args.mix_weights,
            sentence_vectors=args.sentence_vectors,
            batch_size=args.batch_size,
            max_tokens_per_batch=args.max_tokens_per_batch,
            chunk_size=args.chunk_size,
            resume=args.resume,
            progress=not args.quiet,
        )
    except (ValueError, FileExistsError) as error:  # the embedder's checks of its settings and of OUTPUT
        if isinstance(error, UserInputError) or args.debug:
            raise
        raise UserInputError(str(error)) from None
    if not args.quiet and (not dist.is_initialized() or dist.get_rank() == 0):
        print(
            f"embedded {summary['sentences']:,} sentences ({summary['tokens']:,} tokens) "
            f"in {summary['seconds']:.1f} s; "
            f"wrote {args.output}",
            file=sys.stderr,
        )


def export_onnx(args):
    _load_the_model_code()
    from .inference.onnx_export import export_onnx
    from .model.modeling_elmo import ElmoModel

    try:
        model = ElmoModel.from_pretrained(shipped_model_path(args.model))
    except (OSError, ValueError) as error:  # no such model, unreadable or contradictory files
        raise unloadable_model_error(args.model, error) from None
    print(f"wrote {export_onnx(model, args.output, opset=args.opset)}", file=sys.stderr)


COMMANDS = {
    "embed": embed,
    "export-onnx": export_onnx,
    "convert": convert,
    "perplexity": perplexity,
}


def _load_the_model_code():
    """Import torch, transformers and the model, and register the Auto classes (which `import elmo_hf` skips in
    this process): each command calls this once its arguments are checked, before it loads or saves a model."""
    from . import _register_auto_classes

    _register_auto_classes()


def how_to_continue(args):
    """After an interrupt or a failed write: what the command kept for a rerun, as a sentence, or None."""
    if args.command == "embed":
        return _embed_leftovers(args.output)
    if args.command == "convert" and getattr(args, "published", None) is not None:
        from .convert.published import default_download_dir

        folder = os.path.join(args.download_dir or default_download_dir(), published_model(args.published).name)
        if any(name.endswith(".part") for name in (os.listdir(folder) if os.path.isdir(folder) else ())):
            return f"the download is kept in {folder}/: run the same command again to resume it"
    return None


def _embed_leftovers(output):
    """The sentence that tells how to resume the unfinished run of `elmo-hf embed ... output`, or None."""
    work_dir = output + ".partial"
    if not os.path.isdir(work_dir):  # the allennlp layout's flags embed into OUTPUT.incomplete.hdf5 first
        work_dir = output + ".incomplete.hdf5.partial"
    try:
        with open(os.path.join(work_dir, "manifest.json"), encoding="utf-8") as manifest:
            settings = json.load(manifest)
        total = -(-settings["input_lines"] // settings["chunk_size"])
    except (OSError, ValueError, KeyError, TypeError):  # no run to resume, or not one this version wrote
        return None
    chunks = sum(name.startswith("chunk-") and name.endswith(".npz") for name in os.listdir(work_dir))
    return f"{chunks} of {total} chunks are kept in {work_dir}/: run the same command with --resume to continue"


def main(argv=None):
    """`elmo-hf COMMAND ...`: user errors end as one line on stderr and exit status 2 (see user_errors.py)."""
    args = build_parser().parse_args(argv)
    with reported_as_one_line(args.debug), interrupts_reported(lambda: how_to_continue(args), args.debug):
        return COMMANDS[args.command](args)


def script_main(command, description, argv=None):
    """Run one command as a stand-alone script (conversion/*.py, examples/evaluate_perplexity.py) with the
    same arguments and error reporting as `elmo-hf COMMAND`."""
    parser = argparse.ArgumentParser(description=description)
    {"convert": add_convert_arguments, "perplexity": add_perplexity_arguments}[command](parser)
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    args.command = command
    with reported_as_one_line(args.debug), interrupts_reported(lambda: how_to_continue(args), args.debug):
        return COMMANDS[command](args)


if __name__ == "__main__":
    main()
