"""Time elmo_hf's ElmoModel against allennlp's ELMo and bilm-tf on the same random weights and the same workload.

    python benchmarks/benchmark_elmo.py --peer-venv /path/to/peer-venv [--bilmtf-venv /path/to/bilmtf-venv]
        [--sizes small medium original] [--reps 3] [--rounds 1] [--threads 2] [--n-sent 512] [--omp-wait PASSIVE]
        [--work-dir /tmp/elmo-bench]

The workload (`workload.make_workload(512, seed=0)`, or its first `--n-sent` sentences), the timing harness
(`benchlib.run_suite`) and the random weights (`make_random_elmo.py`, the published hdf5 layout) come from the
shared peer folder, `../shared/peer` relative to the repository (or `--peer-dir`). For each size this script
  1. writes random weights with make_random_elmo.py and converts them with our converter (`convert_hdf5`);
  2. measures this machine's roofs for that configuration (`roofline.py`, same thread count): the compute roof
     (its GEMM rate at the model's shapes) for the batches of 32 and the memory roof (the bandwidth of one-row
     products on the LSTM's weights) for batch 1, and prints each mode's fraction of its roof (batch 1 also against
     the sentence roof: the memory roof plus a sentence's other products at the GEMM rate). It reads the roofs
     before and after the size's timings and keeps each one's higher reading: on a shared host the memory roof
     moves several-fold within minutes, as the neighbours take or leave the last-level cache;
  3. times our model and each peer whose venv is given (allennlp's: `setup_peervenv.sh` in the peer folder;
     bilm-tf's, the graph TF Hub's ELMo runs: `setup_bilmtf_venv.sh`), each in its own process so that peak RSS
     figures do not mix; `--rounds 2` alternates the processes twice and keeps each mode's best round, which damps
     the noise of a shared machine;
  4. checks that each peer gives our vectors (every layer, first 8 sentences, zero initial state, allclose atol
     1e-5) and prints the ratios; a peer whose vectors differ gets no ratio.
All sides count words without the sentence boundaries and time the tokenization too (prep).

`--device cuda` runs our side and allennlp's on the GPU (`allennlp_on_device.py`, the same harness; every batch's
vectors are copied back to the host inside the timed call, which also waits for the GPU), and measures the roofs on
the GPU. bilm-tf's peer is CPU-only TensorFlow, so it is refused there.

`--single-sentence-process` adds, per size, one more process per side that only ever embeds one sentence at a
time (the shared harness with batch size 1 on the first 50 sentences, no output check): the peak RSS of a
sentence-at-a-time service, which the main run cannot show because its batch-1 mode runs after the batches of 32
in the same process and starts from the memory they left.

`--prefetch` overlaps our side's tokenization with the model (`harness_prefetch`: the next batches tokenized in a
background thread, pinned memory, copies that do not wait), as `ElmoEmbedder.prefetch` does.

`--variant` times one of our optional faster modes instead of the exact float32 path (allennlp always runs in
float32): `bf16` holds the weights and computes in bfloat16 (`elmo-hf embed --dtype bfloat16`), `int8` applies
PyTorch's dynamic int8 quantization to the `nn.Linear` layers (highway and token projection; the LSTM's batched
products are not `nn.Linear` and stay float32). The printed difference is then the variant's deviation from
allennlp's float32 vectors, i.e. from the exact path.
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
    REPO_ROOT,
    SIZES,
    machine_line,
    peer_harness,
    prepare,
    worker_environment,
)

from elmo_hf.model.configuration_elmo import LSTM_IMPLEMENTATIONS

# Output check: the largest absolute difference to a peer's vectors for its timings to count.
ATOL = 1e-5
# The roof each mode is measured against (roofline.py): the batches of 32 are compute-bound, batch 1 memory-bound.
ROOF_OF_MODE = {"sorted": "compute", "unsorted": "compute", "batch1": "memory"}
# Peer name -> its benchmark script in the peer folder (same harness, workload and weights).
PEER_SCRIPTS = {"allennlp": "bench_allennlp.py", "bilm-tf": "bench_bilm_tf.py"}
VARIANTS = ("fp32", "bf16", "int8")
SINGLE_SENTENCES = 50  # the harness's batch-1 mode times this many


def worker(args):
    """Runs in a fresh process: load our converted checkpoint, dump the check vectors, run the timing suite."""
    import numpy as np
    import torch

    from elmo_hf import ElmoModel, ElmoTokenizer

    benchlib, make_workload = peer_harness(args.peer_dir)

    torch.set_num_threads(args.threads)
    model = ElmoModel.from_pretrained(args.worker, lstm_implementation=args.lstm_implementation).eval()
    if args.variant == "bf16":
        model = model.to(torch.bfloat16)
    elif args.variant == "int8":
        model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
    model = model.to(args.device)
    tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)

    def tokenize(sentences):
        return tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")

    def prep(sentences):
        return tokenize(sentences).to(args.device)

    sentences = make_workload(args.n_sent, seed=0)
    reset = lambda: None  # noqa: E731
    if args.prefetch:
        prep, reset = harness_prefetch(benchlib, tokenize, sentences, args.batch_size, torch.device(args.device))

    def embed(batch):
        # Like allennlp's output: an average of all layers (a scalar mix with equal weights), on the host.
        return torch.stack(model(**batch, output_hidden_states=True).hidden_states).mean(0).float().cpu()

    if args.dump is not None:
        with torch.inference_mode():
            layers = model(**prep(sentences[:CHECK_SENTENCES]), output_hidden_states=True).hidden_states
        # (layers, batch, words, dim), boundaries cut
        np.save(args.dump, torch.stack(layers)[:, :, 1:-1].float().cpu().numpy())

    results = benchlib.run_suite(
        prep,
        embed,
        reset,
        sentences,
        reps=args.reps,
        batch_size=args.batch_size,
        log=lambda message: print(message, flush=True),
    )
    results["env"] = benchlib.env_info()
    with open(args.json, "w") as output:
        json.dump(results, output, indent=1)


def harness_prefetch(benchlib, tokenize, sentences, batch_size, device):
    """`(prep, reset)` for the shared harness that overlap the host's tokenization with the model, as
    `ElmoEmbedder.prefetch` does: when the harness asks for a batch of one of its modes (benchlib.make_batches), the
    next two batches of that mode are tokenized in a background thread while the model runs this one; each batch goes
    to the device from pinned memory without waiting. Nothing is prepared before the harness asks for a pass's first
    batch (`reset`, called at the start of each pass, drops what is pending), so the timings hold all the work."""
    import concurrent.futures

    lists = [
        benchlib.make_batches(sentences, batch_size, sort=True),
        benchlib.make_batches(sentences, batch_size, sort=False),
        [[sentence] for sentence in sentences[:SINGLE_SENTENCES]],
    ]
    following = {}  # a batch -> the batches after it in its mode
    for batches in lists:
        for index, batch in enumerate(batches):
            following.setdefault(_batch_key(batch), batches[index + 1 : index + 3])
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    pending = {}

    def prep(batch):
        key = _batch_key(batch)
        future = pending.pop(key, None)
        for later in following.get(key, []):
            if _batch_key(later) not in pending:
                pending[_batch_key(later)] = executor.submit(tokenize, later)
        encoded = future.result() if future is not None else tokenize(batch)
        if device.type == "cuda":
            encoded = {name: value.pin_memory() for name, value in encoded.items()}
        return {name: value.to(device, non_blocking=True) for name, value in encoded.items()}

    def reset():
        for future in pending.values():
            future.cancel()
        concurrent.futures.wait(list(pending.values()))
        pending.clear()

    return prep, reset


def _batch_key(batch):
    return tuple(map(tuple, batch))


def run_ours(args, checkpoint, json_path, dump_path=None, single_sentences=False):
    """Our worker process: the main workload, or with `single_sentences` one sentence at a time (see above); the
    check vectors go to `dump_path` when given."""
    command = [
        sys.executable,
        __file__,
        "--worker",
        str(checkpoint),
        "--json",
        str(json_path),
        "--reps",
        str(args.reps),
        "--threads",
        str(args.threads),
        "--peer-dir",
        str(args.peer_dir),
        "--variant",
        args.variant,
        "--device",
        args.device,
        "--lstm-implementation",
        args.lstm_implementation,
        *(["--prefetch"] if args.prefetch else []),
        *_workload_arguments(args, single_sentences),
    ]
    if dump_path is not None:
        command += ["--dump", str(dump_path)]
    subprocess.run(command, check=True, env=worker_environment(args.omp_wait))
    return json.loads(json_path.read_text())


def run_peer(args, model_dir, json_path, dump_path=None, single_sentences=False, peer="allennlp"):
    """A peer's process: the main workload, or with `single_sentences` one sentence at a time (see above); the
    check vectors go to `dump_path` when given."""
    script = [str(args.peer_dir / PEER_SCRIPTS[peer])]
    if args.device != "cpu":  # the shared peer scripts run on the CPU; ours runs allennlp on the device
        script = [
            str(REPO_ROOT / "benchmarks" / "allennlp_on_device.py"),
            "--peer-dir",
            str(args.peer_dir),
            "--device",
            args.device,
        ]
    command = [
        str(peer_venvs(args)[peer] / "bin" / "python"),
        *script,
        str(model_dir),
        "--json",
        str(json_path),
        "--reps",
        str(args.reps),
        "--threads",
        str(args.threads),
        *_workload_arguments(args, single_sentences),
    ]
    if dump_path is not None:
        command += ["--dump-ref", str(dump_path)]
    subprocess.run(command, check=True, env=worker_environment(args.omp_wait))
    return json.loads(json_path.read_text())


def peer_venvs(args):
    """{peer name: its venv} for the peers given on the command line."""
    venvs = {"allennlp": args.peer_venv, "bilm-tf": args.bilmtf_venv}
    return {name: venv for name, venv in venvs.items() if venv is not None}


def measure_roofs(args, size, source, reading):
    """This machine's roofs for the size's configuration (roofline.py, in its own process); `reading` names the file."""
    json_path = args.work_dir / f"{size}-roofs-{reading}.json"
    subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "roofline.py"),
            str(source / "options.json"),
            "--threads",
            str(args.threads),
            "--device",
            args.device,
            "--json",
            str(json_path),
        ],
        check=True,
        env=worker_environment(args.omp_wait),
    )
    return json.loads(json_path.read_text())


def best_roofs(readings):
    """The roofs from several readings (`measure_roofs`): each of compute and memory at its highest reading (a roof is
    the best this machine showed), the sentence roof recomputed from those two, and every reading's words/s."""
    from roofline import sentence_roof

    compute = max((reading["compute"] for reading in readings), key=lambda roof: roof["words_per_s"])
    memory = max((reading["memory"] for reading in readings), key=lambda roof: roof["words_per_s"])
    return {
        **readings[0],
        "compute": compute,
        "memory": memory,
        "sentence": sentence_roof(compute, memory),
        "readings_words_per_s": {
            kind: [reading[kind]["words_per_s"] for reading in readings] for kind in ("compute", "memory", "sentence")
        },
    }


def _workload_arguments(args, single_sentences):
    """The harness's workload: the first --n-sent sentences in batches of 32, or the first 50 one at a time."""
    if single_sentences:
        return ["--n-sent", str(SINGLE_SENTENCES), "--batch-size", "1"]
    return ["--n-sent", str(args.n_sent)]


def best_of(rounds):
    """Each mode's fastest round (rounds are whole processes; the machine is shared, so slower means disturbed)."""
    best = dict(rounds[0])
    for mode in MODES:
        best[mode] = max((result[mode] for result in rounds), key=lambda summary: summary["tok_per_s"])
        best[mode]["rounds_tok_per_s"] = [result[mode]["tok_per_s"] for result in rounds]
    return best


def max_difference(ours_path, peer_path):
    import numpy as np

    ours = np.load(ours_path)  # (layers, batch, words, dim)
    peer = np.load(peer_path)
    reference = peer["layers"]
    worst = 0.0
    for row, length in enumerate(peer["lengths"].tolist()):
        worst = max(worst, float(np.abs(ours[:, row, :length] - reference[:, row, :length]).max()))
    return worst


def report_size(size, ours, peers, differences, variant, roofs):
    """Print a size's table: words/s per mode and side, our fraction of the mode's roof, the ratios against each
    peer whose vectors matched ours; returns {peer: {mode: ratio}} for those peers."""
    lines = [
        f"\n== {size} ==",
        f"{'mode':9s} {'impl':9s} {'words/s':>8s} {'rounds':>17s} {'p50 ms':>8s} {'max ms':>8s} "
        f"{'mean ms':>8s} {'peak RSS MB':>11s}",
    ]
    counted = {name: variant != "fp32" or differences[name] <= ATOL for name in peers}
    ratios = {name: {} for name in peers if counted[name]}
    for mode in MODES:
        for name, result in (("elmo_hf", ours), *peers.items()):
            summary = result[mode]
            rounds = "/".join(f"{value:.0f}" for value in summary["rounds_tok_per_s"])
            lines.append(
                f"{mode:9s} {name:9s} {summary['tok_per_s']:8.1f} {rounds:>17s} "
                f"{summary['batch_p50_ms']:8.1f} {summary['batch_max_ms']:8.1f} "
                f"{summary['batch_mean_ms']:8.1f} {summary['peak_rss_mb']:11.0f}"
            )
        for kind in (ROOF_OF_MODE[mode], "sentence") if mode == "batch1" else (ROOF_OF_MODE[mode],):
            roof = roofs[kind]["words_per_s"]
            readings = "/".join(f"{value:.0f}" for value in roofs["readings_words_per_s"][kind])
            lines.append(
                f"{mode:9s} elmo_hf at {ours[mode]['tok_per_s'] / roof:.0%} of the {kind} roof "
                f"({roof:.0f} words/s; read {readings} before/after the timings)"
            )
        for name, peer in peers.items():
            if not counted[name]:
                continue
            ratios[name][mode] = ours[mode]["tok_per_s"] / peer[mode]["tok_per_s"]
            rss = ours[mode]["peak_rss_mb"] / peer[mode]["peak_rss_mb"]
            lines.append(f"{mode:9s} ratio to {name}: {ratios[name][mode]:.2f}x words/s, peak RSS {rss:.2f}x")
    for name, difference in differences.items():
        if variant != "fp32":
            lines.append(
                f"max |elmo_hf {variant} - {name} fp32| over all layers, {CHECK_SENTENCES} sentences: "
                f"{difference:.2e} (the variant's deviation from the exact path)"
            )
        else:
            lines.append(
                f"max |elmo_hf - {name}| over all layers, {CHECK_SENTENCES} sentences: {difference:.2e} "
                f"({'OK' if counted[name] else 'FAIL: its timings are not counted'} at atol {ATOL})"
            )
    print("\n".join(lines), flush=True)
    return ratios


def single_sentence_processes(args, size, source, checkpoint):
    """One process per side that embeds only single sentences; prints and returns each side's batch-1 summary."""
    print(f"{size}: single-sentence processes", flush=True)
    ours = run_ours(args, checkpoint, args.work_dir / f"{size}-ours-single.json", single_sentences=True)["batch1"]
    result = {"elmo_hf": ours}
    line = f"single-sentence process: elmo_hf {ours['tok_per_s']:.1f} words/s, peak RSS {ours['peak_rss_mb']:.0f} MB"
    if args.peer_venv is not None:
        peer = run_peer(args, source, args.work_dir / f"{size}-peer-single.json", single_sentences=True)["batch1"]
        result["allennlp"] = peer
        line += (
            f"; allennlp {peer['tok_per_s']:.1f} words/s, peak RSS {peer['peak_rss_mb']:.0f} MB; ratio "
            f"{ours['tok_per_s'] / peer['tok_per_s']:.2f}x words/s, peak RSS "
            f"{ours['peak_rss_mb'] / peer['peak_rss_mb']:.2f}x"
        )
    print(line, flush=True)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    parser.add_argument("--reps", type=int, default=3, help="repetitions per mode inside one process (median kept)")
    parser.add_argument("--rounds", type=int, default=1, help="alternating process rounds per side (best kept)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--n-sent",
        type=int,
        default=512,
        help="first N sentences of the shared workload (make_workload(N, seed=0) is a prefix of it)",
    )
    parser.add_argument(
        "--omp-wait",
        choices=["PASSIVE", "ACTIVE"],
        default=None,
        help="OMP_WAIT_POLICY for both sides; PASSIVE stops idle OpenMP threads spinning, which "
        "on an oversubscribed machine slows every 2-thread op several-fold",
    )
    parser.add_argument(
        "--single-sentence-process",
        action="store_true",
        help="also time, per size and side, a process that only embeds single sentences (see above)",
    )
    parser.add_argument("--device", default="cpu", help="our side's device, e.g. cuda (see above)")
    parser.add_argument(
        "--variant",
        choices=VARIANTS,
        default="fp32",
        help="our side's mode: the exact float32 path, or an optional faster one (see above)",
    )
    parser.add_argument(
        "--lstm-implementation",
        choices=LSTM_IMPLEMENTATIONS,
        default="auto",
        help="our side's config.lstm_implementation (elmo_hf/model/lstm_paths.py): 'reference' times the plain "
        "loop (on a GPU: without CUDA graphs), 'cuda_graphs' the graphs of the reference step instead of the fused one",
    )
    parser.add_argument(
        "--prefetch",
        action="store_true",
        help="our side tokenizes the next batches in a background thread while the model runs (harness_prefetch)",
    )
    parser.add_argument("--work-dir", type=pathlib.Path, default=pathlib.Path("/tmp/elmo-bench"))
    parser.add_argument("--peer-dir", type=pathlib.Path, default=PEER_DIR)
    parser.add_argument(
        "--peer-venv",
        type=pathlib.Path,
        default=None,
        help="venv made by the peer's setup_peervenv.sh (allennlp); without it allennlp is not timed",
    )
    parser.add_argument(
        "--bilmtf-venv",
        type=pathlib.Path,
        default=None,
        help="venv made by the peer's setup_bilmtf_venv.sh (bilm-tf); without it bilm-tf is not timed",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    parser.add_argument("--batch-size", type=int, default=32, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    if not (args.peer_dir / "workload.py").is_file():
        raise ValueError(f"peer folder {args.peer_dir} lacks workload.py (pass --peer-dir)")
    for option, venv in (("--peer-venv", args.peer_venv), ("--bilmtf-venv", args.bilmtf_venv)):
        if venv is not None and not (venv / "bin" / "python").is_file():
            raise ValueError(f"{option} {venv} has no bin/python (make it with the peer folder's setup script)")
    if args.device != "cpu":
        import torch

        if args.device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"--device {args.device}: this torch sees no CUDA device")
        if args.bilmtf_venv is not None:
            raise ValueError(f"--bilmtf-venv with --device {args.device}: bilm-tf's peer runs on the CPU only")
    args.work_dir.mkdir(parents=True, exist_ok=True)

    all_results = {"machine_at_start": machine_line(), "threads": args.threads}
    all_results["variant"] = args.variant
    all_results["lstm_implementation"] = args.lstm_implementation
    all_results["device"] = args.device
    all_results["prefetch"] = args.prefetch
    if args.device.startswith("cuda"):
        import torch

        all_results["accelerator"] = f"{torch.cuda.get_device_name(args.device)}, torch {torch.__version__}"
        print(f"accelerator: {all_results['accelerator']}", flush=True)
    print(
        f"machine at start: {all_results['machine_at_start']}; elmo_hf variant: {args.variant} on {args.device}",
        flush=True,
    )
    for size in args.sizes:
        source, checkpoint = prepare(args.work_dir, args.peer_dir, size)
        print(f"{size}: measuring this machine's roofs", flush=True)
        readings = [measure_roofs(args, size, source, "before")]
        ours_rounds, peer_rounds = [], {name: [] for name in peer_venvs(args)}
        for index in range(args.rounds):
            print(f"{size}: elmo_hf round {index}", flush=True)
            ours_rounds.append(
                run_ours(args, checkpoint, args.work_dir / f"{size}-ours.json", args.work_dir / f"{size}-ours.npy")
            )
            for name, rounds in peer_rounds.items():
                print(f"{size}: {name} round {index}", flush=True)
                rounds.append(
                    run_peer(
                        args,
                        source,
                        args.work_dir / f"{size}-{name}.json",
                        args.work_dir / f"{size}-{name}.npz",
                        peer=name,
                    )
                )
        print(f"{size}: measuring this machine's roofs again", flush=True)
        readings.append(measure_roofs(args, size, source, "after"))
        roofs = best_roofs(readings)
        ours = best_of(ours_rounds)
        peers = {name: best_of(rounds) for name, rounds in peer_rounds.items()}
        differences = {
            name: max_difference(args.work_dir / f"{size}-ours.npy", args.work_dir / f"{size}-{name}.npz")
            for name in peers
        }
        ratios = report_size(size, ours, peers, differences, args.variant, roofs)
        all_results[size] = {
            "elmo_hf": ours,
            **peers,
            "max_abs_difference": differences,
            "ratios": ratios,
            "roofs": roofs,
            "fraction_of_roof": {
                mode: ours[mode]["tok_per_s"] / roofs[ROOF_OF_MODE[mode]]["words_per_s"] for mode in MODES
            },
            "batch1_fraction_of_sentence_roof": ours["batch1"]["tok_per_s"] / roofs["sentence"]["words_per_s"],
        }
        if args.single_sentence_process:
            all_results[size]["single_sentence_process"] = single_sentence_processes(args, size, source, checkpoint)
    all_results["machine_at_end"] = machine_line()
    print(
        f"\nmachine at end: {all_results['machine_at_end']}; torch: {ours_rounds[0]['env']}, "
        f"OMP_WAIT_POLICY={args.omp_wait}; json: {args.work_dir / 'results.json'}"
    )
    with open(args.work_dir / "results.json", "w") as output:
        json.dump(all_results, output, indent=1)


if __name__ == "__main__":
    main()
