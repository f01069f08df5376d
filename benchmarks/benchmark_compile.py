"""`torch.compile(model)` against the eager model, on the CPU, in one process: sorted batches, one sentence, a
training step.

Compiled, `ElmoModel.forward` runs the reference loop of `modeling_elmo.py` (`lstm_paths.py`); eager, it runs the
fast paths ("cpu_kernels" without gradients, "packed" with them). Each mode times a few fixed batch shapes: every
shape compiles once (`dynamic=False`; the first call's time is reported as the compile time), then eager and compiled
calls alternate round by round, so both see the same load on a shared machine, and the ratio of their medians is
the figure. Before timing, the compiled outputs (inference) or loss and gradients (training) are compared with
eager's.

    python benchmarks/benchmark_compile.py --size small --output benchmarks/results/compile-small
"""

import argparse
import functools
import pathlib
import statistics
import sys
import time

from benchmark_utils import PEER_DIR, TRAINING_CONFIGS, TRAINING_SHARED, machine_line, peer_harness, write_report

# Inference sizes (the published models' shapes, random weights).
SIZES = {
    "small": dict(lstm_dim=1024, projection_dim=128, num_highway_layers=1),
    "medium": dict(lstm_dim=2048, projection_dim=256, num_highway_layers=1),
}


def workload_batches(peer_dir, mode, count, batch_size, seed=0):
    """`count` lists of sentences from the shared workload: length-sorted batches of `batch_size` ("sorted") or
    single sentences ("batch1") near the workload's median length."""
    _, make_workload = peer_harness(peer_dir)
    sentences = [sentence for sentence in make_workload(n=512, seed=seed) if 18 <= len(sentence) <= 28]
    if mode == "batch1":
        return [[sentence] for sentence in sentences[:count]]
    sentences.sort(key=len)
    return [sentences[index * batch_size : (index + 1) * batch_size] for index in range(count)]


def timed(function):
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def compare_interleaved(eager, compiled, rounds):
    """Median seconds per call of each side over `rounds` alternating rounds (each round calls both once)."""
    eager_times, compiled_times = [], []
    for round_index in range(rounds):
        pair = (eager, compiled) if round_index % 2 == 0 else (compiled, eager)
        times = [timed(function) for function in pair]
        if round_index % 2:
            times.reverse()
        eager_times.append(times[0])
        compiled_times.append(times[1])
    return statistics.median(eager_times), statistics.median(compiled_times)


def inference_rows(peer_dir, size, modes, shapes, rounds, threads):
    import torch

    from elmo_hf import ElmoConfig, ElmoModel, ElmoTokenizer

    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**SIZES[size])).eval()
    compiled = torch.compile(model, dynamic=False)
    tokenizer = ElmoTokenizer()
    rows = []
    for mode in modes:
        for sentences in workload_batches(peer_dir, mode, shapes, 32):
            batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
            words = int(batch["attention_mask"].sum())
            with torch.no_grad():
                expected = model(**batch, output_hidden_states=True).hidden_states
                compile_seconds = timed(functools.partial(compiled, **batch))
                actual = compiled(**batch, output_hidden_states=True).hidden_states
                deviation = max(float((a - e).abs().max()) for a, e in zip(actual, expected))
                eager_s, compiled_s = compare_interleaved(
                    functools.partial(model, **batch), functools.partial(compiled, **batch), rounds
                )
            rows.append(
                dict(
                    mode=mode,
                    size=size,
                    shape=list(batch["input_ids"].shape[:2]),
                    words=words,
                    threads=threads,
                    compile_seconds=compile_seconds,
                    eager_words_per_second=words / eager_s,
                    compiled_words_per_second=words / compiled_s,
                    speedup=eager_s / compiled_s,
                    max_abs_deviation=deviation,
                )
            )
            print(rows[-1], flush=True)
    return rows


def training_rows(peer_dir, config_name, shapes, rounds, threads, batch_size=16, vocab_size=10000):
    import torch

    from elmo_hf import ElmoConfig, ElmoForPreTraining, ElmoTokenizer

    # Dropout off: compiled and eager code draw different random numbers, and the losses are compared.
    fields = {**TRAINING_SHARED, **TRAINING_CONFIGS[config_name], "vocab_size": vocab_size, "pretraining_dropout": 0.0}
    config = ElmoConfig(**fields)
    torch.manual_seed(0)
    model = ElmoForPreTraining(config).train()
    compiled = torch.compile(model, dynamic=False)
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)
    rows = []
    for sentences in workload_batches(peer_dir, "sorted", shapes, batch_size, seed=1):
        batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
        mask = batch["attention_mask"].bool()
        batch["labels"] = torch.randint(0, vocab_size, mask.shape).masked_fill(~mask, -100)
        words = int(mask.sum())

        def step(runner, batch=batch):
            torch.manual_seed(3)  # the same negatives on both sides
            model.zero_grad(set_to_none=True)
            loss = runner(**batch).loss
            loss.backward()
            return float(loss), {name: parameter.grad.clone() for name, parameter in model.named_parameters()}

        expected_loss, expected_grads = step(model)
        start = time.perf_counter()
        loss, grads = step(compiled)
        compile_seconds = time.perf_counter() - start
        grad_deviation = max(
            float((grads[name] - grad).abs().max()) / max(1.0, float(grad.abs().max()))
            for name, grad in expected_grads.items()
        )
        eager_s, compiled_s = compare_interleaved(lambda: step(model), lambda: step(compiled), rounds)
        rows.append(
            dict(
                mode="training step",
                size=config_name,
                shape=list(batch["input_ids"].shape[:2]),
                words=words,
                threads=threads,
                compile_seconds=compile_seconds,
                eager_words_per_second=words / eager_s,
                compiled_words_per_second=words / compiled_s,
                speedup=eager_s / compiled_s,
                loss_deviation=abs(loss - expected_loss),
                max_relative_grad_deviation=grad_deviation,
            )
        )
        print(rows[-1], flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small", help="inference model size")
    parser.add_argument("--training-config", choices=sorted(TRAINING_CONFIGS), default="shipped")
    parser.add_argument("--modes", nargs="+", default=["sorted", "batch1", "training"])
    parser.add_argument("--shapes", type=int, default=2, help="batch shapes per mode (each compiles once)")
    parser.add_argument("--rounds", type=int, default=7, help="alternating timing rounds per shape")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--peer-dir", type=pathlib.Path, default=PEER_DIR, help="the shared folder with workload.py")
    parser.add_argument("--output", type=pathlib.Path, help="write OUTPUT.json and OUTPUT.log")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    machine = machine_line()
    print(machine, f"torch {torch.__version__}", flush=True)
    inference_modes = [mode for mode in args.modes if mode != "training"]
    rows = []
    if inference_modes:
        rows += inference_rows(args.peer_dir, args.size, inference_modes, args.shapes, args.rounds, args.threads)
    if "training" in args.modes:
        rows += training_rows(args.peer_dir, args.training_config, args.shapes, args.rounds, args.threads)
    lines = [machine, f"torch {torch.__version__}", " ".join(sys.argv)]
    for row in rows:
        lines.append(
            f"{row['mode']:>13} {row['size']:>7} {row['shape']}: eager {row['eager_words_per_second']:.0f} words/s, "
            f"compiled {row['compiled_words_per_second']:.0f} words/s ({row['speedup']:.2f}x), "
            f"compile {row['compile_seconds']:.0f} s"
        )
    print("\n".join(lines[3:]))
    if args.output:
        write_report(args.output, dict(machine=machine, torch=torch.__version__, argv=sys.argv, rows=rows), lines)


if __name__ == "__main__":
    main()
