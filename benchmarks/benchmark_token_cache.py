"""How much the token cache speeds up ElmoEmbedder, and how far its vectors are from the uncached ones.

Runs the published "original" ELMo size (random weights: speed does not depend on their values) on generated
sentences whose words all come from the cached vocabulary, then prints one JSON line. Each side's time is the median
of `--repeats` timings (`benchmark_utils.rate`).

    PYTHONPATH=$PWD python benchmarks/benchmark_token_cache.py --sentences 256 --threads 2
"""

import argparse
import json
import time

import numpy as np
import torch
from benchmark_utils import rate

from elmo_hf import ElmoConfig, ElmoEmbedder, ElmoModel


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--words-per-sentence", type=int, default=20)
    parser.add_argument("--vocabulary", type=int, default=5000, help="distinct words, all cached")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="timings per side (the median is kept)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    embedder = ElmoEmbedder(ElmoModel(ElmoConfig()), device=args.device)
    rng = np.random.default_rng(0)
    # Word lengths 2 to 12 letters, like running text.
    vocabulary = sorted(
        {
            "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=rng.integers(2, 13)))
            for _ in range(args.vocabulary)
        }
    )
    sentences = [list(rng.choice(vocabulary, size=args.words_per_sentence)) for _ in range(args.sentences)]
    tokens = args.sentences * args.words_per_sentence

    def embed():
        return embedder.embed_sentences(sentences, batch_size=args.batch_size)

    plain = embed()
    plain_seconds = 1.0 / rate(embed, 1.0, args.device, min_seconds=0.0, repeats=args.repeats)
    start = time.perf_counter()
    embedder.set_token_cache(vocabulary)
    build_seconds = time.perf_counter() - start
    cached = embed()
    cached_seconds = 1.0 / rate(embed, 1.0, args.device, min_seconds=0.0, repeats=args.repeats)
    difference = max(float(np.abs(a - b).max()) for a, b in zip(plain, cached))
    print(
        json.dumps(
            {
                "device": args.device,
                "threads": args.threads,
                "sentences": args.sentences,
                "tokens": tokens,
                "vocabulary": len(vocabulary),
                "tokens_per_second_without_cache": round(tokens / plain_seconds),
                "tokens_per_second_with_cache": round(tokens / cached_seconds),
                "speed_up": round(plain_seconds / cached_seconds, 2),
                "cache_build_seconds": round(build_seconds, 2),
                "max_abs_difference": difference,
            }
        )
    )


if __name__ == "__main__":
    main()
