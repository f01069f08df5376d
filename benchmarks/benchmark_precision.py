#!/usr/bin/env python
"""Float32, bfloat16 and int8 LSTM weights side by side: words/s and the deviation from float32, in one process.

    python benchmarks/benchmark_precision.py --size original          # random weights of the published size
    python benchmarks/benchmark_precision.py --size shipped           # elmo_hf.DEFAULT_MODEL

The modes: `fp32` (the exact default), `bf16` (`model.to(torch.bfloat16)`, `elmo-hf embed --dtype bfloat16`) and
`int8` (`model.quantize_weights("int8")`, `elmo-hf embed --quantize int8`). Each round times, for every mode in turn,
the shared harness's single sentences (the first `--n-single` of the workload, one call each) and its length-sorted
batches of 32; the best round per mode is kept, so the modes share the machine's drift. The memory roof (words/s at
batch 1 if
the LSTM's per-step weights streamed at this machine's measured bandwidth, `roofline.memory_roof`) is printed for
each mode's weight bytes: float32 4 bytes a weight, bfloat16 2, int8 1. The deviation from float32 is measured per
layer over every word of the first 64 sentences: the largest and mean absolute difference, and the cosine per word.
"""

import argparse
import json
import os

import torch
from benchmark_utils import PEER_DIR, machine_line, peer_harness, prepare
from roofline import memory_roof

import elmo_hf
from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.model import cpu_kernels

MODES = ("fp32", "bf16", "int8")
# The variables that limit PyTorch's, oneDNN's and fbgemm's kernels to an older instruction set (`docs/speed.md`).
ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "FBGEMM_ENABLE_INSTRUCTIONS")
WEIGHT_BYTES = {"fp32": 4, "bf16": 2, "int8": 1}


def load_models(size, work_dir, peer_dir):
    """{mode: ElmoModel} and the checkpoint's options in bilm-tf's form (for the roof)."""
    if size == "shipped":
        path = elmo_hf.DEFAULT_MODEL
    else:
        _, path = prepare(work_dir, peer_dir, size)
    models = {mode: ElmoModel.from_pretrained(path).eval() for mode in MODES}
    models["bf16"].to(torch.bfloat16)
    models["int8"].quantize_weights("int8")
    config = models["fp32"].config
    lstm = {"projection_dim": config.projection_dim, "dim": config.lstm_dim, "n_layers": config.num_lstm_layers}
    options = {"lstm": lstm}
    return models, ElmoTokenizer.from_pretrained(path), options


def layers(model, tokenizer, sentences):
    """Every layer, float32: (layers, batch, words, dim), and the word mask (batch, words)."""
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch, output_hidden_states=True).hidden_states
    return torch.stack(hidden).float(), batch["attention_mask"].bool()


def deviations(models, tokenizer, sentences):
    """Per mode and layer: max and mean |mode - fp32|, min and mean cosine per word, over the real words."""
    reference, mask = layers(models["fp32"], tokenizer, sentences)
    result = {}
    for mode in MODES[1:]:
        other, _ = layers(models[mode], tokenizer, sentences)
        per_layer = []
        for expected, actual in zip(reference, other):
            expected, actual = expected[mask], actual[mask]  # (words, dim)
            cosine = torch.nn.functional.cosine_similarity(expected, actual, dim=-1)
            per_layer.append(
                {
                    "max_abs": float((expected - actual).abs().max()),
                    "mean_abs": float((expected - actual).abs().mean()),
                    "cosine_min": float(cosine.min()),
                    "cosine_mean": float(cosine.mean()),
                    "largest_value": float(expected.abs().max()),
                }
            )
        result[mode] = per_layer
    return result


def instruction_sets():
    """What the kernels run with: the variables that limit them, PyTorch's capability, whether oneDNN computes
    bfloat16 products, and whether int8 takes 7-bit inputs."""
    kernels = {name: os.environ.get(name, "-") for name in ISA_VARIABLES}
    kernels["capability"] = torch.backends.cpu.get_cpu_capability()
    kernels["bfloat16_products"] = not cpu_kernels.bfloat16_is_slow()
    kernels["int8_7_bit_inputs"] = cpu_kernels._int8_reduce_range()
    return kernels


def words_per_second(benchlib, model, tokenizer, batches):
    """Words/s of one pass over `batches` (lists of tokenized sentences), tokenizing included: the shared harness's
    `time_pass`, as the peers are timed."""
    result = benchlib.time_pass(
        lambda batch: tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt"),
        lambda encoded: model(**encoded, output_hidden_states=True),
        lambda: None,  # no carried state
        batches,
    )
    return result["n_tok"] / result["total_s"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="original", choices=["small", "medium", "original", "shipped"])
    parser.add_argument("--n-sent", type=int, default=256, help="sentences of the shared workload in sorted batches")
    parser.add_argument("--n-single", type=int, default=50, help="of them, the first ones timed one call each")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (best kept per mode)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work-dir", default="/tmp/elmo-bench")
    parser.add_argument("--peer-dir", default=str(PEER_DIR))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    benchlib, make_workload = peer_harness(args.peer_dir)
    sentences = make_workload(args.n_sent, seed=0)
    models, tokenizer, options = load_models(args.size, args.work_dir, args.peer_dir)
    print(f"machine: {machine_line()}; torch {torch.__version__}, {args.threads} threads; size {args.size}", flush=True)
    kernels = instruction_sets()
    print("kernels: " + ", ".join(f"{name} {value}" for name, value in kernels.items()), flush=True)

    passes = {
        "batch1": [[sentence] for sentence in sentences[: args.n_single]],
        "sorted": benchlib.make_batches(sentences, 32, True),
    }
    for model in models.values():  # warm-up: allocator, oneDNN, the int8 and prepacked weight copies
        words_per_second(benchlib, model, tokenizer, passes["sorted"][:2] + passes["batch1"][:3])
    best = {mode: dict.fromkeys(passes, 0.0) for mode in MODES}
    for round_index in range(args.rounds):
        for mode in MODES:
            for name, batches in passes.items():
                rate = words_per_second(benchlib, models[mode], tokenizer, batches)
                best[mode][name] = max(best[mode][name], rate)
                print(f"round {round_index} {mode} {name}: {rate:,.1f} words/s", flush=True)

    with torch.inference_mode():
        roof = memory_roof(options, "cpu")
    float32_roof = roof["words_per_s"]
    print(
        f"\nmemory roof: {roof['mb_per_word']:.0f} MB of float32 LSTM weights per word at {roof['gb_per_s']:.1f} GB/s"
    )
    print("| mode | batch 1 words/s | vs fp32 | memory roof (words/s) | of the roof | sorted batches of 32 | vs fp32 |")
    print("|---|---|---|---|---|---|---|")
    for mode in MODES:
        mode_roof = float32_roof * WEIGHT_BYTES["fp32"] / WEIGHT_BYTES[mode]
        single, batched = best[mode]["batch1"], best[mode]["sorted"]
        print(
            f"| {mode} | {single:,.1f} | {single / best['fp32']['batch1']:.2f}x | {mode_roof:,.0f} | "
            f"{single / mode_roof:.0%} | {batched:,.1f} | {batched / best['fp32']['sorted']:.2f}x |"
        )
    check = deviations(models, tokenizer, sentences[:64])
    print("\ndeviation from fp32 over every word of 64 sentences, per layer (token layer first):")
    for mode, per_layer in check.items():
        for index, layer in enumerate(per_layer):
            print(
                f"  {mode} layer {index}: max |diff| {layer['max_abs']:.2e} (values up to {layer['largest_value']:.2f})"
                f", mean {layer['mean_abs']:.2e}, cosine per word min {layer['cosine_min']:.6f} mean "
                f"{layer['cosine_mean']:.6f}"
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as output:
            json.dump(
                {
                    "machine": machine_line(),
                    "kernels": kernels,
                    "size": args.size,
                    "n_sent": args.n_sent,
                    "n_single": args.n_single,
                    "best": best,
                    "roof": roof,
                    "deviation": check,
                },
                output,
            )


if __name__ == "__main__":
    main()
