"""How far the optional faster modes move the vectors: bf16 weights and compute, and dynamic int8 quantization of
the `nn.Linear` layers, against the exact float32 path, on the shared fixture weights (allennlp's test ELMo).

    python tools/variant_deviation.py [--fixtures ../shared/fixtures]

The float32 path itself matches bilm-tf's outputs on these weights to ~1e-6 (tests/test_parity.py). Each of the
fixture's 30 sentences is embedded alone (stateless); the report gives, per variant, the largest absolute
difference over every layer and word, and the largest absolute value of the float32 vectors for scale.
"""

import argparse
import json
import os
import pathlib

import torch

from elmo_hf.convert_bilm_tf import convert_hdf5

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def variant(model, name):
    """The model as `benchmarks/benchmark_elmo.py --variant NAME` runs it."""
    if name == "bf16":
        return model.to(torch.bfloat16)
    if name == "int8":
        return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    raise ValueError(f"unknown variant {name!r}; expected 'bf16' or 'int8'")


def all_layers(model, tokenizer, sentences):
    """(layers, words, dim) float32 per sentence, boundaries cut."""
    outputs = []
    with torch.inference_mode():
        for words in sentences:
            batch = tokenizer([words], is_split_into_words=True, return_tensors="pt")
            layers = torch.stack(model(**batch, output_hidden_states=True).hidden_states)  # (layers, 1, n + 2, dim)
            outputs.append(layers[:, 0, 1:-1].float())
    return outputs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_fixtures = os.environ.get("ELMO_FIXTURES", str(REPO_ROOT.parent / "shared" / "fixtures"))
    parser.add_argument("--fixtures", type=pathlib.Path, default=pathlib.Path(default_fixtures))
    args = parser.parse_args(argv)
    folder = args.fixtures / "allennlp_elmo"
    if not (folder / "lm_weights.hdf5").is_file():
        raise FileNotFoundError(f"{folder / 'lm_weights.hdf5'} not found (pass --fixtures or set ELMO_FIXTURES)")
    sentences = [line.split() for row in json.loads((folder / "sentences.json").read_text()) for line in row]
    torch.manual_seed(0)
    report = {}
    for name in ("bf16", "int8"):
        model, tokenizer, _ = convert_hdf5(folder / "options.json", folder / "lm_weights.hdf5")
        exact = all_layers(model.eval(), tokenizer, sentences)
        approximate = all_layers(variant(model, name), tokenizer, sentences)
        deviation = max(float((a - e).abs().max()) for a, e in zip(approximate, exact))
        scale = max(float(e.abs().max()) for e in exact)
        report[name] = {"max_abs_deviation": deviation, "max_abs_value_fp32": scale}
        print(
            f"{name}: max |variant - fp32| {deviation:.3e} over {len(sentences)} sentences, all layers "
            f"(largest |fp32 value| {scale:.2f})"
        )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
