"""The main job: ELMo vectors for a text file, end to end, with the model shipped in the package.

    python examples/quickstart.py [--model DIR_OR_NAME] [--input FILE] [--output FILE]

It loads the small English ELMo shipped inside elmo_hf (`elmo_hf.DEFAULT_MODEL`, trained on cased English text;
offline) or --model, shows a few vectors, then runs `elmo-hf embed INPUT OUTPUT`
(examples/sentences.txt -> outputs/vectors.hdf5 by default).
"""

import argparse
import pathlib
import sys

import torch

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from elmo_hf import DEFAULT_MODEL, ElmoModel, ElmoTokenizer  # noqa: E402
from elmo_hf.cli import main as elmo_hf_command  # noqa: E402

SENTENCES = [
    ["the", "cat", "sat", "on", "the", "mat", "."],
    ["elmo", "gives", "each", "word", "a", "vector", "that", "depends", "on", "its", "sentence", "."],
    ["hi"],
]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="an ELMo checkpoint (default: elmo_hf.DEFAULT_MODEL)")
    parser.add_argument("--input", default=str(REPO_ROOT / "examples" / "sentences.txt"), help="one sentence a line")
    parser.add_argument("--output", default="outputs/vectors.hdf5", help="where `elmo-hf embed` writes")
    args = parser.parse_args(argv)
    model, tokenizer = ElmoModel.from_pretrained(args.model), ElmoTokenizer.from_pretrained(args.model)
    print(f"model: {'the shipped default, ' if args.model == DEFAULT_MODEL else ''}{args.model}")
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model.eval()(**batch, output_hidden_states=True)
    layers = torch.stack(output.hidden_states, dim=1)  # (batch, layers, words, 2 * projection_dim)
    for row, words in enumerate(SENTENCES):
        vectors = layers[row, :, 1 : len(words) + 1]  # drop <S> and </S>
        print(f"{' '.join(words)!r}: {tuple(vectors.shape)} (layers, words, dim), mean |v| {vectors.abs().mean():.4f}")
    # The same word in two contexts gets two different top-layer vectors, but one layer-0 vector.
    period_a, period_b = layers[0, :, 7], layers[1, :, 12]  # (layers, dim) each
    print(
        f"'.' in sentences 1 and 2: layer-0 distance {torch.dist(period_a[0], period_b[0]):.2e}, "
        f"top-layer distance {torch.dist(period_a[-1], period_b[-1]):.3f}"
    )

    output = pathlib.Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.unlink(missing_ok=True)
    command = ["embed", args.input, str(output)] + ([] if args.model == DEFAULT_MODEL else ["--model", args.model])
    print("elmo-hf " + " ".join(command))
    elmo_hf_command(command)
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
