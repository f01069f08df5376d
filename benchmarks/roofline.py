"""This machine's roofs for an ELMo configuration, measured with torch at the model's own shapes.

    python benchmarks/roofline.py OPTIONS_JSON [--threads 2] [--batch-rows 32] [--tokens 832] [--device cpu]

Three roofs, so that speed figures from different machines can be compared as fractions:

- compute roof (batches of 32): the model's FLOPs per word (those of `../shared/peer/flops.py`: char CNN, highway,
  token projection, the LSTM's input, recurrent and projection products; elementwise work left out) done at the
  best rate this machine's float32 GEMM reaches on the model's product shapes. Each product's own rate is printed
  too: the recurrent and projection products run on `--batch-rows` rows, the CNN on its unfolded windows, the
  others on `--tokens` rows (32 sentences of the workload's mean length, 26 words). An implementation that skips
  work (the char CNN once per distinct word) can pass the roof; the fraction then says so.
- memory roof (batch 1): one sentence steps through the LSTM one word at a time, and each step streams the
  recurrent and projection weights of every layer and direction (the input products run once per sentence, on all
  its words). The roof is the best bandwidth of those one-row products, measured on matrices of the model's shapes
  (one product per matrix, or both directions in one batched product as the model runs them; a word at a time
  through every layer, or a layer at a time through a sentence's 28 steps as the model runs them, which keeps one
  layer's weights in cache where they fit), over the bytes they stream per word. It leaves out the char CNN,
  highway and input products, which a sentence also needs: a bound that no implementation can reach.
- sentence roof (batch 1): the memory roof's time per word plus the time of every other product of a sentence (char
  CNN, highway, token projection, the LSTM's input products: `products_per_word` less the recurrent and projection
  ones) at the compute roof's GEMM rate. A sentence's stages depend on each other in order (CNN, highway, input
  products, recurrence), so their bounds add up. At the medium size on a CPU the other products take a sizeable
  share of this roof's time, so no implementation reaches the memory roof itself there (`benchmark_elmo.py` prints
  a run's fraction of both roofs; RESULTS.md gives the latest).

`--device cuda` measures the same products on the GPU (each timing waits for the GPU), so that a GPU run's speed is
a fraction of that GPU's roofs.

Words here are the workload's words (the model also processes `<S>` and `</S>`, which the roofs do not count), as in
the benchmark's words/s.
"""

import argparse
import json
import pathlib
import sys

import torch
from benchmark_utils import rate

# Steps of a sentence of the workload's mean length (26 words and the two boundaries), for the memory roof.
SENTENCE_STEPS = 28


def gemm_rate(rows, inner, columns, device):
    """FLOP/s of `x (rows, inner) @ w (inner, columns)` in float32 on `device`."""
    x, w = torch.randn(rows, inner, device=device), torch.randn(inner, columns, device=device) * 0.02
    out = torch.empty(rows, columns, device=device)
    return rate(lambda: torch.mm(x, w, out=out), 2.0 * rows * inner * columns, device)


def products_per_word(options):
    """[(name, FLOPs per word, rows kind, inner, columns)]: every matrix product of the model, per word."""
    cnn, lstm = options["char_cnn"], options["lstm"]
    chars, char_dim = cnn["max_characters_per_token"], cnn["embedding"]["dim"]
    filters = sum(count for _, count in cnn["filters"])
    projection, cell = lstm["projection_dim"], lstm["dim"]
    directions_and_layers = 2 * lstm["n_layers"]
    products = [
        (
            f"char CNN width {width}",
            2.0 * char_dim * width * count * (chars - width + 1),
            "windows",
            char_dim * width,
            count,
        )
        for width, count in cnn["filters"]
    ]
    products += [("highway", 2.0 * filters * 2 * filters, "tokens", filters, 2 * filters)] * cnn["n_highway"]
    products.append(("token projection", 2.0 * filters * projection, "tokens", filters, projection))
    products.append(("LSTM input", directions_and_layers * 2.0 * projection * 4 * cell, "tokens", projection, 4 * cell))
    products.append(
        ("LSTM recurrent", directions_and_layers * 2.0 * projection * 4 * cell, "batch", projection, 4 * cell)
    )
    products.append(("LSTM projection", directions_and_layers * 2.0 * cell * projection, "batch", cell, projection))
    return products


def compute_roof(options, device, batch_rows=32, tokens=832):
    """Words/s at the best GEMM rate on the model's shapes, and each product's rate (GFLOP/s) and FLOPs per word."""
    chars = options["char_cnn"]["max_characters_per_token"]
    parts = {}
    for name, flops, rows_kind, inner, columns in products_per_word(options):
        if rows_kind == "windows":  # the CNN's unfolded windows: a few words at a time, as the model runs it
            width = inner // options["char_cnn"]["embedding"]["dim"]
            rows = 64 * (chars - width + 1)
        else:
            rows = batch_rows if rows_kind == "batch" else tokens
        gflops = gemm_rate(rows, inner, columns, device) / 1e9
        parts[name] = {"mflop_per_word": flops / 1e6, "gflop_per_s": gflops, "rows": rows}
    total = sum(flops for _, flops, *_ in products_per_word(options))
    peak = max(part["gflop_per_s"] for part in parts.values())
    # At each product's own rate instead: a lower, shape-bound figure.
    seconds_per_word = sum(part["mflop_per_word"] * 1e6 / (part["gflop_per_s"] * 1e9) for part in parts.values())
    return {
        "words_per_s": peak * 1e9 / total,
        "mflop_per_word": total / 1e6,
        "gflop_per_s": peak,
        "words_per_s_at_each_shape": 1.0 / seconds_per_word,
        "products": parts,
    }


def memory_roof(options, device, steps=SENTENCE_STEPS):
    """Words/s at batch 1 if each step's weight streams ran at the best bandwidth measured on the model's shapes:
    one-row products per matrix (`torch.mm`), or both directions of a layer in one batched product (`torch.bmm`,
    as the model runs them, which lets two threads stream at once), taken either a word at a time through every
    layer or, in the model's order, a layer at a time through all `steps` words of a sentence. The second order
    keeps one layer's weights in a large last-level cache when they fit (medium: 21 MB per layer), so it is the
    higher roof on such CPUs; without it the recurrence itself can run faster than the "roof"."""
    lstm = options["lstm"]
    projection, cell = lstm["projection_dim"], lstm["dim"]
    # Per layer, both directions: the recurrent (projection, 4 * cell) and projection (cell, projection) weights.
    stacks = []
    for _ in range(lstm["n_layers"]):
        stacks += [
            torch.randn(2, projection, 4 * cell, device=device) * 0.02,
            torch.randn(2, cell, projection, device=device) * 0.02,
        ]
    rows = [torch.randn(2, 1, stack.shape[1], device=device) for stack in stacks]  # (directions, 1 row, in)
    streamed = float(sum(stack.numel() * stack.element_size() for stack in stacks))  # bytes per word

    def per_matrix():
        for row, stack in zip(rows, stacks):
            for direction in range(2):
                torch.mm(row[direction], stack[direction])

    def per_layer():
        for row, stack in zip(rows, stacks):
            torch.bmm(row, stack)

    def layer_by_layer():
        for layer in range(lstm["n_layers"]):
            recurrent, projected = stacks[2 * layer], stacks[2 * layer + 1]
            recurrent_row, projected_row = rows[2 * layer], rows[2 * layer + 1]
            for _ in range(steps):
                torch.bmm(recurrent_row, recurrent)
                torch.bmm(projected_row, projected)

    bandwidths = {
        "mm": rate(per_matrix, streamed, device),
        "bmm": rate(per_layer, streamed, device),
        "bmm layer by layer": rate(layer_by_layer, streamed * steps, device),
    }
    best = max(bandwidths.values())
    return {
        "words_per_s": best / streamed,
        "mb_per_word": streamed / 1e6,
        "gb_per_s": best / 1e9,
        "gb_per_s_by_product": {name: value / 1e9 for name, value in bandwidths.items()},
    }


# The products streamed once per step at batch 1 (the memory roof); a sentence's other products run once on its words.
STEP_PRODUCTS = ("LSTM recurrent", "LSTM projection")


def sentence_roof(compute, memory):
    """Words/s at batch 1 with each stage of a sentence at its bound: the memory roof's time per word, plus every
    product but the per-step ones at the compute roof's GEMM rate (`compute` and `memory` as returned above)."""
    other_mflop = sum(part["mflop_per_word"] for name, part in compute["products"].items() if name not in STEP_PRODUCTS)
    streaming_seconds = 1.0 / memory["words_per_s"]
    other_seconds = other_mflop * 1e6 / (compute["gflop_per_s"] * 1e9)
    return {
        "words_per_s": 1.0 / (streaming_seconds + other_seconds),
        "other_mflop_per_word": other_mflop,
        "share_of_other_products": other_seconds / (streaming_seconds + other_seconds),
    }


def measure(options, threads=2, batch_rows=32, tokens=832, device="cpu"):
    device = torch.device(device)
    if device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        raise ValueError("torch.backends.cuda.matmul.allow_tf32 is on: the roofs are for exact float32 products")
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    with torch.inference_mode():
        compute, memory = compute_roof(options, device, batch_rows, tokens), memory_roof(options, device)
    return {
        "threads": threads,
        "device": str(device),
        "compute": compute,
        "memory": memory,
        "sentence": sentence_roof(compute, memory),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("options", type=pathlib.Path, help="the model's options.json (bilm-tf's layout)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-rows", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=832)
    parser.add_argument("--device", default="cpu", help="where the products run, e.g. cuda")
    parser.add_argument("--json", type=pathlib.Path, help="also write the figures here")
    args = parser.parse_args(argv)
    roofs = measure(json.loads(args.options.read_text()), args.threads, args.batch_rows, args.tokens, args.device)
    compute, memory = roofs["compute"], roofs["memory"]
    for name, part in compute["products"].items():
        print(
            f"  {name:20s} {part['mflop_per_word']:8.2f} MFLOP/word at {part['gflop_per_s']:6.1f} GFLOP/s "
            f"({part['rows']} rows)"
        )
    print(
        f"compute roof: {compute['words_per_s']:.0f} words/s ({compute['mflop_per_word']:.1f} MFLOP/word at "
        f"{compute['gflop_per_s']:.0f} GFLOP/s; {compute['words_per_s_at_each_shape']:.0f} words/s with every "
        "product at its own shape's rate)"
    )
    print(
        f"memory roof at batch 1: {memory['words_per_s']:.0f} words/s ({memory['mb_per_word']:.1f} MB/word at "
        f"{memory['gb_per_s']:.1f} GB/s)"
    )
    sentence = roofs["sentence"]
    print(
        f"sentence roof at batch 1: {sentence['words_per_s']:.0f} words/s (the memory roof's streams, plus "
        f"{sentence['other_mflop_per_word']:.1f} MFLOP/word of other products at {compute['gflop_per_s']:.0f} GFLOP/s: "
        f"{sentence['share_of_other_products']:.0%} of its time)"
    )
    if args.json:
        args.json.write_text(json.dumps(roofs, indent=1))
    return roofs


if __name__ == "__main__":
    sys.exit(main() and 0)
