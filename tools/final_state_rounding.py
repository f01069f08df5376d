"""How far the float32 CPU kernels' final LSTM states move from the reference loop by rounding alone, with and without
the token cache: the measurement behind the differential harness's `FLOAT32_STATE_TOLERANCE`.

    python tools/final_state_rounding.py --trials 400 --model-seed 23

Prints, over `--trials` random batches of 4 rows of up to 6 words on `helpers.tiny_model(seed=--model-seed)` (seed 23
is the harness's weights after `load_state_dict(assign=True)`), the median, 95th percentile and largest deviation of
the final states (relative to the larger of the clips and the largest value) and of the layers (relative to the
largest value).
"""

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from helpers import random_batch, tiny_model  # noqa: E402
from test_paths_differential import run, truth_model  # noqa: E402  (the harness's own forward and truth)

from elmo_hf import ElmoTokenCache  # noqa: E402
from elmo_hf.lstm_paths import lstm_path  # noqa: E402


def largest_share(got, want, scale):
    """The largest difference over the pairs, relative to the larger of `scale` and the largest wanted value."""
    largest = max(float(w.abs().max()) for w in want)
    return max(float((g - w).abs().max()) for g, w in zip(got, want)) / max(scale, largest)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--model-seed", type=int, default=23)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = tiny_model(seed=args.model_seed)
    truth = truth_model(model)
    clips = max(1.0, model.config.cell_clip or 0.0, model.config.proj_clip or 0.0)
    shares = {"final states, no token cache": [], "final states, token cache": [], "layers, token cache": []}
    for trial in range(args.trials):
        input_ids, _ = random_batch(torch.Generator().manual_seed(trial), batch=4, max_words=6, chars=20, vocabulary=5)
        with torch.no_grad():
            want_layers, want_states = run(truth, input_ids)
            assert lstm_path(model, input_ids, None, 0.0) == "cpu_kernels"
            _, states = run(model, input_ids)
            cache = ElmoTokenCache(model.character_encoder, input_ids.flatten(0, 1)[:5])
            cached_layers, cached_states = run(model, input_ids, token_cache=cache)
        shares["final states, no token cache"].append(largest_share(states, want_states, clips))
        shares["final states, token cache"].append(largest_share(cached_states, want_states, clips))
        shares["layers, token cache"].append(largest_share([cached_layers], [want_layers], 1.0))
    for what, values in shares.items():
        values.sort()
        print(
            f"{what}: median {statistics.median(values):.2e}, 95th percentile {values[int(0.95 * len(values))]:.2e}, "
            f"largest {values[-1]:.2e}"
        )


if __name__ == "__main__":
    main()
