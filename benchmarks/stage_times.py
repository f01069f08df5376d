"""Where our CPU (or GPU) time goes, per stage of the model, in milliseconds per word.

    python benchmarks/stage_times.py --sizes medium original [--threads 2] [--work-dir /tmp/elmo-bench]
        [--peer-dir ../shared/peer] [--step-loop]

For each size: random weights in the published layout (the peer folder's `make_random_elmo.py`, reused from
`--work-dir` when `benchmark_elmo.py` already wrote them), converted with our converter; then 4 length-sorted
batches of 32 and 20 single sentences of the shared workload, each stage timed by wrapping its function: the LSTM
recurrence (`cpu_kernels.packed_layer_forward`), the LSTM input products (`ElmoBiLstmLayer.input_gates`), the char CNN
(`ElmoCharacterEncoder.convolve`), highway and projection (`highway_and_project`). The stages nest inside the total,
which also holds the tokenizer and the rest. Timings are single runs: compare machines by their shares, not digits.

`--step-loop` also times a bare loop of one sentence's LSTM steps (28 words, two layers, one row, both directions) at
the size's shapes: the per-step products alone, then with the step's elementwise work. Their difference is the
per-step overhead that no product speed-up removes.
"""

import argparse
import collections
import pathlib
import time

import torch
from benchmark_utils import PEER_DIR, SIZES, peer_harness, prepare, rate
from roofline import SENTENCE_STEPS  # the steps of a sentence of the workload's mean length, as the memory roof

from elmo_hf import ElmoModel, ElmoTokenizer
from elmo_hf.model import cpu_kernels, modeling_elmo

# Stage name -> (owner, function name) wrapped by the timer.
STAGES = {
    "LSTM recurrence": (cpu_kernels, "packed_layer_forward"),
    "LSTM input products": (modeling_elmo.ElmoBiLstmLayer, "input_gates"),
    "char CNN": (modeling_elmo.ElmoCharacterEncoder, "convolve"),
    "highway + projection": (modeling_elmo.ElmoCharacterEncoder, "highway_and_project"),
}


def time_stages(seconds):
    """Wraps every stage's function so that its wall time adds up in `seconds[stage]`."""
    for stage, (owner, name) in STAGES.items():
        function = getattr(owner, name)

        def timed(*args, _function=function, _stage=stage, **kwargs):
            start = time.perf_counter()
            result = _function(*args, **kwargs)
            seconds[_stage] += time.perf_counter() - start
            return result

        setattr(owner, name, timed)


def stage_table(model, sentences, seconds):
    """{mode: (words/s, {"total": ms per word, stage: ms per word})} for sorted batches of 32 and single sentences."""
    tokenizer = ElmoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
    by_length = sorted(sentences, key=len, reverse=True)
    modes = {
        "sorted 32": [by_length[start : start + 32] for start in range(0, 128, 32)],
        "batch 1": [[sentence] for sentence in sentences[:20]],
    }
    table = {}
    for mode, batches in modes.items():
        with torch.inference_mode():
            for batch in batches[:2]:  # warm-up
                model(**tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt"))
            seconds.clear()
            words, start = 0, time.perf_counter()
            for batch in batches:
                inputs = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
                torch.stack(model(**inputs, output_hidden_states=True).hidden_states).mean(0)
                words += sum(len(sentence) for sentence in batch)
            total = time.perf_counter() - start
        per_word = {"total": 1000 * total / words, **{stage: 1000 * seconds[stage] / words for stage in STAGES}}
        table[mode] = (words / total, per_word)
    return table


def cell_update(gates, memory, clip=3.0):
    """The LSTM step's elementwise work, as in `cpu_kernels.packed_layer_forward`: gates `(2, 1, 4 * cell)` and memory
    `(2, 1, cell)` -> the new memory and the output before its projection, both `(2, 1, cell)`."""
    input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=-1)
    memory = (torch.sigmoid(forget_gate) * memory + torch.sigmoid(input_gate) * torch.tanh(candidate)).clamp(
        -clip, clip
    )
    return memory, torch.sigmoid(output_gate) * torch.tanh(memory)


def step_loop(config, elementwise):
    """ms per word of a bare one-row LSTM loop at `config`'s shapes (see the module docstring): the median of
    `rate`'s timings of one sentence's steps through every layer."""
    projection, cell = config.projection_dim, config.lstm_dim
    # The recurrent weight (in, out) and, as the model projects one row (`cpu_kernels._project`), the projection
    # weight's (out, in) copy, read transposed.
    layers = [
        (torch.randn(2, projection, 4 * cell) * 0.02, (torch.randn(2, projection, cell) * 0.02).transpose(1, 2))
        for _ in range(config.num_lstm_layers)
    ]
    gate_input = torch.randn(2, 1, 4 * cell)

    def sentence():
        for recurrent, projected in layers:  # a layer at a time through the sentence, as the model runs
            hidden, memory = torch.zeros(2, 1, projection), torch.zeros(2, 1, cell)
            for _ in range(SENTENCE_STEPS):
                gates = torch.baddbmm(gate_input, hidden, recurrent)  # (2, 1, 4 * cell)
                if not elementwise:
                    hidden = torch.bmm(gates[..., :cell], projected)  # (2, 1, projection)
                    continue
                memory, output = cell_update(gates, memory)
                hidden = torch.bmm(output, projected).clamp(-3.0, 3.0)

    with torch.inference_mode():
        return 1000 / rate(sentence, SENTENCE_STEPS)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", choices=list(SIZES), default=["medium", "original"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work-dir", type=pathlib.Path, default=pathlib.Path("/tmp/elmo-bench"))
    parser.add_argument("--peer-dir", type=pathlib.Path, default=PEER_DIR)
    parser.add_argument("--step-loop", action="store_true", help="also time the bare LSTM step loop (see above)")
    args = parser.parse_args(argv)
    _, make_workload = peer_harness(args.peer_dir)

    torch.set_num_threads(args.threads)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    seconds = collections.defaultdict(float)
    time_stages(seconds)
    sentences = make_workload(128, seed=0)
    for size in args.sizes:
        _, checkpoint = prepare(args.work_dir, args.peer_dir, size)  # made once in --work-dir, as benchmark_elmo.py
        model = ElmoModel.from_pretrained(checkpoint).eval()
        for mode, (words_per_second, per_word) in stage_table(model, sentences, seconds).items():
            stages = ", ".join(f"{name} {value:.3f}" for name, value in per_word.items())
            print(f"{size}, {mode}: {words_per_second:.0f} words/s; ms per word: {stages}", flush=True)
        if args.step_loop:
            products, with_elementwise = (step_loop(model.config, elementwise) for elementwise in (False, True))
            print(
                f"{size}, bare step loop: products alone {products:.3f} ms per word, with the elementwise work "
                f"{with_elementwise:.3f} (medians of 5 timings)",
                flush=True,
            )


if __name__ == "__main__":
    main()
