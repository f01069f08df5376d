"""Parity and speed at the published models' size: ELMoForManyLangs' own code against the converted checkpoint.

The published models share the shape of the package's `cnn_50_100_512_4096_sample.json` (char_dim 50, word_dim 100,
2048 CNN filters, 2 highway layers, 2 x 4096 LSTM cells projected to 512). Their weights cannot be fetched here, so a
model of that shape with the package's own random initialisation stands in; the arithmetic is the same.

    # 1. with the venv of setup_efml_venv.sh: build the model, run the original, store outputs and times
    CUDA_VISIBLE_DEVICES= /tmp/efml-venv/bin/python tools/efml/published_shape_check.py original /tmp/efml-big
    # 2. with elmo-hf installed: convert, run the compatibility Embedder, compare
    python tools/efml/published_shape_check.py converted /tmp/efml-big

Both steps time `sents2elmo(SENTENCES)` (64 sentences, 5-30 words, one batch) on a fresh Embedder, best of
--repeats, with --threads torch threads, and print one JSON line.
"""

import argparse
import json
import os
import random
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
WORDS = "the of and to in a is was that for 今天 天气 很 好 我们 café über naïve Straße ставка 🙂 東京 ! . ,".split()


def sentences(count=64, seed=0):
    generator = random.Random(seed)
    return [[generator.choice(WORDS) for _ in range(generator.randint(5, 30))] for _ in range(count)]


def best_time(run, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return min(times), result


def original(folder, repeats):
    sys.path.insert(0, HERE)
    import make_efml_reference  # noqa: F401  (imports efml_shim first)
    from elmoformanylangs import Embedder

    config = json.load(
        open(os.path.join(sys.modules["elmoformanylangs"].__path__[0], "configs", "cnn_50_100_512_4096_sample.json"))
    )
    make_efml_reference.write_model(folder, config, legacy_pickle=True, seed=0, weight_std=None)
    sents = sentences()
    seconds, vectors = best_time(lambda: Embedder(folder).sents2elmo(sents, output_layer=-2), repeats)
    np.savez(os.path.join(folder, "_original_outputs.npz"), *vectors)
    return {"side": "original", "seconds": seconds}


def converted(folder, repeats):
    from elmo_hf.compat.elmoformanylangs import Embedder

    sents = sentences()
    start = time.perf_counter()
    Embedder(folder, cache_dir=os.path.join(folder, "_cache"))  # converts (and verifies) once
    conversion = time.perf_counter() - start
    seconds, vectors = best_time(
        lambda: Embedder(folder, cache_dir=os.path.join(folder, "_cache")).sents2elmo(sents, output_layer=-2), repeats
    )
    expected = np.load(os.path.join(folder, "_original_outputs.npz"))
    difference = max(float(np.abs(v - expected[f"arr_{i}"]).max()) for i, v in enumerate(vectors))
    return {"side": "elmo-hf", "seconds": seconds, "max_abs_difference": difference, "first_use_seconds": conversion}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("side", choices=["original", "converted"])
    parser.add_argument("folder")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    result = (original if args.side == "original" else converted)(args.folder, args.repeats)
    print(json.dumps({**result, "threads": args.threads, "sentences": 64}))


if __name__ == "__main__":
    main()
