"""allennlp 2.10.1's ELMo timed on a GPU, with the shared peer harness: the peer side of `benchmark_elmo.py
--device cuda`.

    PEER_PYTHON benchmarks/allennlp_on_device.py MODEL_DIR --peer-dir ../shared/peer --device cuda [--json OUT]
        [--dump-ref OUT.npz] [--reps 3] [--threads 2] [--n-sent 512] [--batch-size 32]

The shared peer script (`bench_allennlp.py`) runs allennlp on the CPU only. This one loads the same weights
(options.json + weights.hdf5, the published layout) into `allennlp.modules.elmo.Elmo`, moves it to `--device`, and
times it exactly as our side is timed there: the character ids go to the device inside the timed preparation, and
each batch's representation is copied back to the host inside the timed call (which also waits for the GPU). The
check vectors (`--dump-ref`: every layer of the first 8 sentences, boundaries cut, zero initial state) have the
layout of the shared script's, so `benchmark_elmo.max_difference` reads either.
"""

import argparse
import json
import pathlib
import time

from benchmark_utils import CHECK_SENTENCES, peer_harness


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=pathlib.Path)
    parser.add_argument("--peer-dir", type=pathlib.Path, required=True, help="the shared peer folder (its harness)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n-sent", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--dump-ref", type=pathlib.Path)
    args = parser.parse_args(argv)

    benchlib, make_workload = peer_harness(args.peer_dir)
    import allennlp_elmo_shim  # noqa: F401  (from the peer folder: registers allennlp.modules before any allennlp import)
    import numpy as np
    import torch
    from allennlp.modules.elmo import Elmo, batch_to_ids

    torch.set_num_threads(args.threads)
    # Exact float32, as our side: cuDNN's convolutions (allennlp's char CNN) default to TF32 on recent GPUs, which
    # moves its vectors by ~5e-4 from the float32 ones and would fail the output check.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    device = torch.device(args.device)
    start = time.perf_counter()
    elmo = (
        Elmo(
            str(args.model_dir / "options.json"),
            str(args.model_dir / "weights.hdf5"),
            num_output_representations=1,
            dropout=0.0,
            requires_grad=False,
        )
        .eval()
        .to(device)
    )
    load_seconds = time.perf_counter() - start
    stateful_lstm = elmo._elmo_lstm._elmo_lstm  # allennlp carries the LSTM state between calls; reset() zeroes it

    def prep(sentences):
        return batch_to_ids(sentences).to(device)

    def embed(char_ids):
        return elmo(char_ids)["elmo_representations"][0].cpu()

    def reset():
        stateful_lstm.reset_states()

    sentences = make_workload(args.n_sent, seed=0)
    if args.dump_ref is not None:
        reset()
        with torch.inference_mode():
            activations = elmo._elmo_lstm(prep(sentences[:CHECK_SENTENCES]))["activations"]
        layers = torch.stack(activations)[:, :, 1:-1].cpu().numpy()  # (layers, batch, words, dim), boundaries cut
        lengths = np.array([len(sentence) for sentence in sentences[:CHECK_SENTENCES]])
        np.savez(args.dump_ref, layers=layers, lengths=lengths)
    results = benchlib.run_suite(
        prep,
        embed,
        reset,
        sentences,
        reps=args.reps,
        batch_size=args.batch_size,
        log=lambda message: print(message, flush=True),
    )
    results.update({"impl": f"allennlp Elmo on {device}", "load_s": load_seconds, "env": benchlib.env_info()})
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
