"""Package a trained `ElmoForPreTraining` checkpoint as the model shipped inside elmo_hf (`elmo_hf.DEFAULT_MODEL`).

    python recipes/english-bilm/package.py training/elmo-english-small \\
        --output-dir elmo_hf/pretrained/elmo-english-small

Writes config.json, model.safetensors (weights stored in `--storage-dtype`, float16 by default: half the size),
tokenizer_config.json and vocab.txt. The config says float32, so `from_pretrained` computes in float32 from the
rounded weights. No code files and no `auto_map`: the package registers its classes itself. The model card
(README.md) of the output directory is kept. With `--evaluate NAME=TEXT ...` it also writes eval_results.json:
the stateless perplexities of the packaged model and of the float32 checkpoint on each text
(elmo_hf.inference.perplexity), i.e. what the rounding costs.
"""

import argparse
import json
import os

import torch
from safetensors.torch import save_file

from elmo_hf import ElmoConfig, ElmoForPreTraining, ElmoTokenizer, ElmoWordVocabulary
from elmo_hf.inference.perplexity import evaluate_perplexity, load_language_model, read_sentences
from elmo_hf.user_errors import UserInputError, add_debug_argument, reported_as_one_line, unloadable_model_error

STORAGE_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
WRITTEN_FILES = ("config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt")


def package(checkpoint, output_dir, storage_dtype="float16", num_sampled_negatives=None):
    """Writes the packaged model to `output_dir`; returns the number of parameters. `num_sampled_negatives`, when
    given, replaces the checkpoint's training setting in the packaged config: what further training of the packaged
    model draws (a run with the full softmax, 0, from a model that ships with a sampled one keeps the model's)."""
    if storage_dtype not in STORAGE_DTYPES:
        raise UserInputError(
            f"--storage-dtype: storage_dtype must be one of {sorted(STORAGE_DTYPES)}, got {storage_dtype!r}"
        )
    try:
        model = ElmoForPreTraining.from_pretrained(checkpoint, dtype=torch.float32)
        tokenizer = ElmoTokenizer.from_pretrained(checkpoint)
        vocabulary = ElmoWordVocabulary.from_pretrained(checkpoint)  # vocab.txt, needed for perplexity
    except (OSError, ValueError) as error:  # no such folder, unreadable or contradictory files
        raise unloadable_model_error(checkpoint, error) from None
    os.makedirs(output_dir, exist_ok=True)
    weights = {
        name: tensor.detach().to(STORAGE_DTYPES[storage_dtype]).contiguous()
        for name, tensor in model.state_dict().items()
    }
    save_file(weights, os.path.join(output_dir, "model.safetensors"), metadata={"format": "pt"})

    config = model.config.to_dict()
    # no code files; labels belong to the task heads; the checkpoint's local path means nothing elsewhere
    for key in ("auto_map", "id2label", "label2id", "_name_or_path"):
        config.pop(key, None)
    config["dtype"] = "float32"  # compute dtype: from_pretrained upcasts the stored weights
    if num_sampled_negatives is not None:
        config["num_sampled_negatives"] = num_sampled_negatives
        try:  # the config's own check of the field
            ElmoConfig.from_dict(config)
        except ValueError as error:
            raise UserInputError(f"--num-sampled-negatives: {error}") from None
    config["architectures"] = [ElmoForPreTraining.__name__]
    with open(os.path.join(output_dir, "config.json"), "w", encoding="utf-8") as out:
        out.write(json.dumps(config, indent=2, sort_keys=True) + "\n")

    tokenizer.save_pretrained(output_dir)
    vocabulary.save_pretrained(output_dir)
    tokenizer_config_path = os.path.join(output_dir, "tokenizer_config.json")
    with open(tokenizer_config_path, encoding="utf-8") as source:
        tokenizer_config = json.load(source)
    tokenizer_config.pop("auto_map", None)
    with open(tokenizer_config_path, "w", encoding="utf-8") as out:
        out.write(json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n")
    # save_pretrained also copies the classes' code next to the files, and maybe a chat template etc.: drop them.
    for name in os.listdir(output_dir):
        if name not in WRITTEN_FILES and name not in ("README.md", "eval_results.json"):
            os.remove(os.path.join(output_dir, name))
    return sum(tensor.numel() for tensor in weights.values())


def stateless_perplexities(model_dir, texts, test_subset=None, batch_size=64):
    """{name: evaluate_perplexity's result} for each `name: path` of `texts`, stateless protocol; with
    `test_subset`, also "test_subset": the first `test_subset` sentences of texts["test"] (what CI re-checks)."""
    model, tokenizer, vocabulary = load_language_model(model_dir)
    sentences = {name: read_sentences(path) for name, path in texts.items()}
    if test_subset:
        sentences["test_subset"] = sentences["test"][:test_subset]
    return {
        name: evaluate_perplexity(model, tokenizer, vocabulary, text, "stateless", batch_size, show_progress=True)
        for name, text in sentences.items()
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="an ElmoForPreTraining checkpoint folder with its vocab.txt")
    parser.add_argument("--output-dir", required=True, help="e.g. elmo_hf/pretrained/elmo-english-small")
    parser.add_argument("--storage-dtype", default="float16", choices=sorted(STORAGE_DTYPES))
    parser.add_argument(
        "--evaluate",
        nargs="*",
        default=[],
        metavar="NAME=TEXT",
        help="e.g. valid=outputs/ptb/corpus/valid.txt test=outputs/ptb/corpus/test.txt",
    )
    parser.add_argument("--test-subset", type=int, help="also evaluate the first N sentences of the test text")
    parser.add_argument(
        "--num-sampled-negatives",
        type=int,
        help="the sampled softmax's negatives in the packaged config, for further training (default: the checkpoint's)",
    )
    add_debug_argument(parser)
    args = parser.parse_args(argv)
    texts = dict(item.split("=", 1) for item in args.evaluate)
    if args.test_subset and "test" not in texts:
        parser.error("--test-subset needs a text named test in --evaluate")
    with reported_as_one_line(args.debug):
        parameters = package(args.checkpoint, args.output_dir, args.storage_dtype, args.num_sampled_negatives)
        size = os.path.getsize(os.path.join(args.output_dir, "model.safetensors"))
        print(f"{args.output_dir}: {parameters:,} parameters, model.safetensors {size / 2**20:.1f} MiB")
        if texts:
            results = {
                "protocol": "stateless",
                "parameters": parameters,
                "storage_dtype": args.storage_dtype,
                # --test-subset N, or the sentences of a text named test_subset
                "subset_sentences": args.test_subset
                or (len(read_sentences(texts["test_subset"])) if "test_subset" in texts else None),
                "packaged": stateless_perplexities(args.output_dir, texts, args.test_subset),
                "float32_checkpoint": stateless_perplexities(args.checkpoint, texts, args.test_subset),
            }
            with open(os.path.join(args.output_dir, "eval_results.json"), "w", encoding="utf-8") as out:
                out.write(json.dumps(results, indent=2) + "\n")
            for name in results["packaged"]:
                packaged, original = results["packaged"][name], results["float32_checkpoint"][name]
                print(
                    f"{name}: forward / backward / combined perplexity {packaged['forward_perplexity']:.2f} / "
                    f"{packaged['backward_perplexity']:.2f} / {packaged['perplexity']:.2f} "
                    f"(float32 checkpoint: {original['perplexity']:.4f}, packaged: {packaged['perplexity']:.4f})"
                )


if __name__ == "__main__":
    main()
