"""Time the ONNX export on onnxruntime against our ElmoModel, on the same random weights and workload, in one run.

    python benchmarks/benchmark_onnx.py [--size medium] [--reps 3] [--threads 2] [--n-sent 512]
        [--work-dir /tmp/elmo-bench]

The weights (`make_random_elmo.py`, converted by our converter) come from `benchmark_utils.prepare`, the workload
(`workload.make_workload`) and the harness (`benchlib.run_suite`: sorted / unsorted batches of 32, batch 1) from the
shared peer folder `../shared/peer`. The checkpoint is exported with `elmo_hf.inference.onnx_export.export_onnx`; each
side then runs in its own process (so peak RSS figures do not mix) with the same number of threads, and embeds like
`benchmark_elmo.py`: the average of all layers, on the host, tokenization included. Words exclude the sentence
boundaries. Both sides' vectors for the first 8 sentences are compared (every layer).
"""

import argparse
import json
import pathlib
import subprocess
import sys

from benchmark_utils import (
    CHECK_SENTENCES,
    MODES,
    PEER_DIR,
    SIZES,
    cpu_model,
    machine_line,
    peer_harness,
    prepare,
    worker_environment,
)

SIDES = ("elmo_hf", "onnxruntime")


def worker(args):
    """Runs in a fresh process: one side's check vectors and timing suite."""
    import numpy as np
    import torch

    from elmo_hf import ElmoConfig, ElmoModel, ElmoTokenizer

    benchlib, make_workload = peer_harness(args.peer_dir)

    torch.set_num_threads(args.threads)
    config = ElmoConfig.from_pretrained(args.checkpoint)
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)
    if args.worker == "elmo_hf":
        model = ElmoModel.from_pretrained(args.checkpoint).eval()

        def layers(batch):  # (layers, batch, words, dim)
            return torch.stack(model(**batch, output_hidden_states=True).hidden_states)

        tensors = "pt"
    else:
        import onnxruntime

        from elmo_hf.inference.onnx_export import ElmoOnnxModel

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.inter_op_num_threads = 1
        if args.omp_wait == "PASSIVE":  # onnxruntime's own pool: idle threads sleep too
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        onnx_model = ElmoOnnxModel(args.onnx_dir, session_options=options)

        def layers(batch):  # (layers, batch, words, dim)
            return onnx_model(batch["input_ids"], batch["attention_mask"])

        tensors = "np"

    def prep(sentences):
        return tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors=tensors)

    def embed(batch):
        return layers(batch).mean(0)  # like allennlp's output: an average of all layers

    sentences = make_workload(args.n_sent, seed=0)
    with torch.inference_mode():
        np.save(args.dump, np.asarray(layers(prep(sentences[:CHECK_SENTENCES])))[:, :, 1:-1])  # boundaries cut
    results = benchlib.run_suite(
        prep, embed, lambda: None, sentences, reps=args.reps, log=lambda message: print(message, flush=True)
    )
    results["env"] = benchlib.env_info()
    with open(args.json, "w") as output:
        json.dump(results, output, indent=1)


def run_side(args, side, checkpoint, onnx_dir):
    json_path, dump_path = args.work_dir / f"onnx-{side}.json", args.work_dir / f"onnx-{side}.npy"
    command = [
        sys.executable,
        __file__,
        "--worker",
        side,
        "--checkpoint",
        str(checkpoint),
        "--onnx-dir",
        str(onnx_dir),
        "--json",
        str(json_path),
        "--dump",
        str(dump_path),
        "--reps",
        str(args.reps),
        "--threads",
        str(args.threads),
        "--n-sent",
        str(args.n_sent),
        "--peer-dir",
        str(args.peer_dir),
    ]
    if args.omp_wait is not None:
        command += ["--omp-wait", args.omp_wait]
    subprocess.run(command, check=True, env=worker_environment(args.omp_wait))
    return json.loads(json_path.read_text()), dump_path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=list(SIZES), default="medium")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per mode inside one process (median kept)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads, and onnxruntime's intra-op threads")
    parser.add_argument("--n-sent", type=int, default=512, help="first N sentences of the shared workload")
    parser.add_argument(
        "--omp-wait",
        choices=["PASSIVE", "ACTIVE"],
        default=None,
        help="OMP_WAIT_POLICY for our side; PASSIVE also stops onnxruntime's idle threads spinning "
        "(on an oversubscribed machine spinning threads slow every op)",
    )
    parser.add_argument("--work-dir", type=pathlib.Path, default=pathlib.Path("/tmp/elmo-bench"))
    parser.add_argument("--peer-dir", type=pathlib.Path, default=PEER_DIR)
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    for hidden in ("--checkpoint", "--onnx-dir", "--json", "--dump"):
        parser.add_argument(hidden, type=pathlib.Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    if not (args.peer_dir / "workload.py").is_file():
        raise ValueError(f"peer folder {args.peer_dir} lacks workload.py (pass --peer-dir)")
    args.work_dir.mkdir(parents=True, exist_ok=True)
    print(f"CPU: {cpu_model()}; machine at start: {machine_line()}", flush=True)

    _, checkpoint = prepare(args.work_dir, args.peer_dir, args.size)
    onnx_dir = args.work_dir / f"{args.size}-onnx"
    if not (onnx_dir / "model.onnx").is_file():
        from elmo_hf import ElmoModel
        from elmo_hf.inference.onnx_export import export_onnx

        export_onnx(ElmoModel.from_pretrained(checkpoint).eval(), onnx_dir)
        print(f"{args.size}: exported {onnx_dir / 'model.onnx'}", flush=True)

    results, dumps = {}, {}
    for side in SIDES:
        print(f"{args.size}: {side}", flush=True)
        results[side], dumps[side] = run_side(args, side, checkpoint, onnx_dir)

    import numpy as np

    difference = float(np.abs(np.load(dumps["onnxruntime"]) - np.load(dumps["elmo_hf"])).max())
    lines = [
        f"\n== {args.size}, {args.threads} threads, {args.n_sent} sentences, OMP_WAIT_POLICY={args.omp_wait} ==",
        f"{'mode':9s} {'impl':12s} {'words/s':>8s} {'p50 ms':>8s} {'max ms':>8s} {'peak RSS MB':>11s}",
    ]
    for mode in MODES:
        for side in SIDES:
            summary = results[side][mode]
            lines.append(
                f"{mode:9s} {side:12s} {summary['tok_per_s']:8.1f} {summary['batch_p50_ms']:8.1f} "
                f"{summary['batch_max_ms']:8.1f} {summary['peak_rss_mb']:11.0f}"
            )
        ratio = results["onnxruntime"][mode]["tok_per_s"] / results["elmo_hf"][mode]["tok_per_s"]
        lines.append(f"{mode:9s} ratio        onnxruntime / elmo_hf = {ratio:.2f}x words/s")
    lines.append(
        f"max |onnxruntime - elmo_hf| over all layers, {CHECK_SENTENCES} sentences: {difference:.2e} "
        "(padded positions included)"
    )
    lines.append(f"machine at end: {machine_line()}; torch: {results['elmo_hf']['env']}")
    print("\n".join(lines), flush=True)
    summary = {"cpu": cpu_model(), "results": results, "max_abs_difference": difference}
    with open(args.work_dir / "onnx-results.json", "w") as output:
        json.dump(summary, output, indent=1)


if __name__ == "__main__":
    main()
