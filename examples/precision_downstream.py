#!/usr/bin/env python
"""The downstream rows of the faster modes: the same task head trained on a biLM's layers (`--model`, by default the
shipped default biLM) computed in float32, in bfloat16 (`--dtype bfloat16`) and with int8 weights
(`--quantize int8`), same seeds, same data.

    python examples/precision_downstream.py --task pos --variant '{"fraction": 0.1}' --seeds 0 \
        --modes float32 bfloat16 int8 --work-dir outputs/precision-downstream

For each mode the biLM's layers of every sentence are computed once (kept in `--work-dir`), then
`task_input_study.py` trains and scores the head on them (its variant fields; the scalar mix, task words and dropouts
of the recipe unless the variant says otherwise). Prints a JSON line per mode and a table of test accuracy against
float32's. The layers' own deviation from float32 (largest difference, lowest cosine per word) is printed beside
them. `--served` adds, per faster mode, the head trained on float32's layers and scored on that mode's (a head
trained once and served in the faster mode). The mode `noise` is a control, not a way to run the model: float32's
layers plus seeded Gaussian noise with, per biLM layer, the standard deviation of bfloat16's difference from float32
(it needs `bfloat16` among the modes, before it): a head trained on it shows what any input perturbation of that size
does to training.
"""

import argparse
import json
import os
import time

import downstream_benchmark as benchmark
import task_input_study as study
import torch

from elmo_hf import DEFAULT_MODEL, ElmoModel, ElmoTokenizer

MODES = ("float32", "bfloat16", "int8", "noise")
# The recipes' dropouts; with these alone x_k is the training words and the biLM's token layer (as in the tables of
# docs/speed.md). Add '{"pretrained_vocab": true, "use_bilm_token_layer": false}' with --variant for the recipes' x_k.
RECIPE = {"scalar_mix_dropout": 0.0, "classifier_dropout": 0.3}


def bilm_in_mode(model_name, mode):
    """The biLM `model_name` (a folder or Hub id), evaluated in `mode`."""
    model = ElmoModel.from_pretrained(model_name).eval()
    if mode == "bfloat16":
        return model.to(torch.bfloat16)
    if mode == "int8":
        model.quantize_weights("int8")
    return model


def noisy_layers(exact, rounded, seed):
    """`exact`'s layers ({split: [(layers, words, dim)]}) plus Gaussian noise whose standard deviation per biLM layer
    is that of `rounded - exact` over every word of every split."""
    differences = [(r.float() - e.float()) for split in exact for e, r in zip(exact[split], rounded[split])]
    std = torch.cat([difference.flatten(1) for difference in differences], dim=1).std(dim=1)  # (layers,)
    generator = torch.Generator().manual_seed(seed)
    return {
        split: [e + torch.randn(e.shape, generator=generator) * std.view(-1, 1, 1) for e in exact[split]]
        for split in exact
    }


def layer_deviation(layers, reference):
    """Largest absolute difference and lowest cosine per word over all layers of all sentences."""
    largest, lowest_cosine = 0.0, 1.0
    for mine, exact in zip(layers, reference):
        mine, exact = mine.float(), exact.float()
        largest = max(largest, float((mine - exact).abs().max()))
        cosine = torch.nn.functional.cosine_similarity(mine, exact, dim=-1, eps=1e-12)
        lowest_cosine = min(lowest_cosine, float(cosine.min()))
    return largest, lowest_cosine


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=benchmark.TASKS, required=True)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="the biLM: a folder or Hub id (ElmoModel weights)")
    parser.add_argument("--variant", default="{}", help="task_input_study.py's variant, on top of the recipe's fields")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--data-dir", default="outputs/downstream-data")
    parser.add_argument("--work-dir", default="outputs/precision-downstream")
    parser.add_argument(
        "--served", action="store_true", help="also score the float32-trained head on each faster mode's layers"
    )
    args = parser.parse_args(argv)
    if "float32" not in args.modes:
        raise ValueError(f"--modes {' '.join(args.modes)}: float32 is the reference and must be among them")
    if "noise" in args.modes and (
        "bfloat16" not in args.modes or args.modes.index("noise") < args.modes.index("bfloat16")
    ):
        raise ValueError("--modes: noise takes the size of bfloat16's deviation, so bfloat16 must come before it")
    os.makedirs(args.work_dir, exist_ok=True)
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    tokenizer = ElmoTokenizer.from_pretrained(args.model)
    words, _, _, _ = study.load_task(args.task, args.data_dir, tokenizer)
    variant = json.dumps({**RECIPE, **json.loads(args.variant)})

    rows, mode_layers = {}, {}
    for mode in ["float32", *(mode for mode in args.modes if mode != "float32")]:
        cache = os.path.join(args.work_dir, f"{args.task}-{mode}.pt")
        start = time.time()
        if mode == "noise":
            layers = noisy_layers(mode_layers["float32"], mode_layers["bfloat16"], seed=0)
            torch.save(layers, cache)
        elif os.path.exists(cache):
            layers = torch.load(cache)
        else:
            model = bilm_in_mode(args.model, mode)
            layers = {
                split: [layer.float() for layer in benchmark.bilm_layers(model, tokenizer, words[split], 64, split)]
                for split in words
            }
            torch.save(layers, cache)
        layer_seconds = time.time() - start
        if mode in ("float32", "bfloat16"):  # what the noise control is made from; others are not kept
            mode_layers[mode] = layers
        result = study.main(
            ["--task", args.task, "--cache", cache, "--seeds", *map(str, args.seeds), "--variant", variant]
            + ["--data-dir", args.data_dir]
        )
        every_layer = [layer for split in words for layer in layers[split]]
        if mode == "float32":
            exact_layers, (largest, lowest_cosine) = every_layer, (0.0, 1.0)  # the reference itself
        else:
            largest, lowest_cosine = layer_deviation(every_layer, exact_layers)
        rows[mode] = {**result, "mode": mode, "layer_seconds": round(layer_seconds)}
        rows[mode].update(largest_difference=largest, lowest_cosine=lowest_cosine)
        print(json.dumps(rows[mode]), flush=True)
        if args.served and mode != "float32":
            served = study.main(
                ["--task", args.task, "--cache", os.path.join(args.work_dir, f"{args.task}-float32.pt")]
                + ["--score-cache", cache, "--seeds", *map(str, args.seeds), "--variant", variant]
                + ["--data-dir", args.data_dir]
            )
            rows[f"{mode}, float32-trained head"] = {**rows[mode], **served, "mode": f"{mode} (served)"}
            print(json.dumps(rows[f"{mode}, float32-trained head"]), flush=True)

    exact = sum(rows["float32"]["test"]) / len(args.seeds)
    print(f"\n{args.task}, seeds {args.seeds}, test accuracy (dev-selected epoch):")
    for mode, row in rows.items():
        mean = sum(row["test"]) / len(args.seeds)
        print(
            f"  {mode:30s} {100 * mean:6.2f}  ({100 * (mean - exact):+.2f} points vs float32; layers: largest "
            f"difference {row['largest_difference']:.2e}, lowest cosine per word {row['lowest_cosine']:.6f})"
        )
    return rows


if __name__ == "__main__":
    main()
