"""The main job: ELMo vectors for a text file, end to end.

    python examples/quickstart.py [--model DIR] [--input FILE] [--output FILE]

It prepares a checkpoint in elmo-quickstart/ (without --model: the real bilm-tf test weights from
../shared/fixtures or $ELMO_FIXTURES converted, when present, else a small ELMo with random weights; it says
which), shows a few vectors, then runs `elmo-hf embed INPUT OUTPUT --model elmo-quickstart`
(examples/sentences.txt -> outputs/vectors.hdf5 by default).
"""

import argparse
import os
import pathlib
import sys

import torch

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
QUICKSTART_DIR = pathlib.Path("elmo-quickstart")

from elmo_hf import ElmoConfig, ElmoModel, ElmoTokenizer  # noqa: E402
from elmo_hf.cli import main as elmo_hf_command  # noqa: E402

SENTENCES = [
    ["The", "cat", "sat", "on", "the", "mat", "."],
    ["ELMo", "gives", "each", "word", "a", "vector", "that", "depends", "on", "its", "sentence", "."],
    ["Hi"],
]


def load_model(model_dir):
    if model_dir:
        return ElmoModel.from_pretrained(model_dir), ElmoTokenizer.from_pretrained(model_dir), f"checkpoint {model_dir}"
    fixtures = pathlib.Path(os.environ.get("ELMO_FIXTURES", REPO_ROOT.parent / "shared" / "fixtures"))
    if (fixtures / "allennlp_elmo" / "lm_weights.hdf5").is_file():
        from conversion.convert_elmo_original_tf_to_hf import convert_hdf5

        folder = fixtures / "allennlp_elmo"
        model, tokenizer, report = convert_hdf5(folder / "options.json", folder / "lm_weights.hdf5", QUICKSTART_DIR)
        source = (
            f"the bilm-tf test weights in {folder}, converted to {QUICKSTART_DIR} "
            f"(matches bilm-tf's arithmetic to {report['verification_max_abs_difference']:.1e})"
        )
        return model, tokenizer, source
    torch.manual_seed(0)
    config = ElmoConfig(lstm_dim=256, projection_dim=64, filters=[[1, 32], [2, 32], [3, 64]], num_highway_layers=1)
    model, tokenizer = ElmoModel(config), ElmoTokenizer()
    model.save_pretrained(QUICKSTART_DIR)
    tokenizer.save_pretrained(QUICKSTART_DIR)
    return model, tokenizer, f"a small ELMo with RANDOM weights, saved to {QUICKSTART_DIR} (no fixtures found)"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a converted ELMo checkpoint folder")
    parser.add_argument("--input", default=str(REPO_ROOT / "examples" / "sentences.txt"), help="one sentence a line")
    parser.add_argument("--output", default="outputs/vectors.hdf5", help="where `elmo-hf embed` writes")
    args = parser.parse_args(argv)
    model, tokenizer, source = load_model(args.model)
    print(f"model: {source}")
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model.eval()(**batch, output_hidden_states=True)
    layers = torch.stack(output.hidden_states, dim=1)  # (batch, layers, words, 2 * projection_dim)
    for row, words in enumerate(SENTENCES):
        vectors = layers[row, :, 1 : len(words) + 1]  # drop <S> and </S>
        print(f"{' '.join(words)!r}: {tuple(vectors.shape)} (layers, words, dim), mean |v| {vectors.abs().mean():.4f}")
    # The same word in two contexts gets two different top-layer vectors, but one layer-0 vector.
    period_a, period_b = layers[0, :, 7], layers[1, :, 12]  # (layers, dim) each
    print(f"'.' in sentences 1 and 2: layer-0 distance {torch.dist(period_a[0], period_b[0]):.2e}, "
          f"top-layer distance {torch.dist(period_a[-1], period_b[-1]):.3f}")

    output = pathlib.Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.unlink(missing_ok=True)
    command = ["embed", args.input, str(output), "--model", args.model or str(QUICKSTART_DIR)]
    print("elmo-hf " + " ".join(command))
    elmo_hf_command(command)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
