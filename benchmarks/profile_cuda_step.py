"""Where one LSTM step's time goes on a GPU: each of the fused step's four kernels, the whole fused step and the whole
reference step, each captured in a CUDA graph of many repetitions (so launch costs are out) and timed with CUDA events.

    python benchmarks/profile_cuda_step.py [--lstm-dim 2048] [--projection-dim 256] [--rows 32 1]

Prints microseconds per step (both directions, one layer) and the rate of the two products.
"""

import argparse

import torch

from elmo_hf.model import cuda_kernels, triton_lstm_kernels
from elmo_hf.model.modeling_elmo import ElmoBiLstmLayer

REPEATS = 200


def graph_time(work, repeats=REPEATS):
    """Microseconds per call of `work()`, from a CUDA graph of `repeats` calls (median of 5 replays)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        work()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeats):
            work()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / repeats)
    return sorted(times)[2]


def step_timings(layer, rows):
    """Microseconds per step of each part, for `rows` rows in both directions of `layer`."""
    lstm_dim, projection_dim = layer.projection_weight.shape[1:]
    gate_input = torch.randn(2, rows, 4 * lstm_dim, device="cuda")
    hidden = torch.randn(2, rows, projection_dim, device="cuda")
    cell = torch.randn(2, rows, lstm_dim, device="cuda")
    splits = cuda_kernels.projection_splits(lstm_dim, cell.dtype)  # the projection's slices of the cell's columns
    memory = torch.empty(2 * splits, rows, lstm_dim // splits, device="cuda")
    split_weight = layer.projection_weight.reshape(2 * splits, lstm_dim // splits, projection_dim)
    gates = torch.empty_like(gate_input)
    projected = torch.empty(2 * splits, rows, projection_dim, device="cuda")
    output = torch.empty(2, rows, 4, projection_dim, device="cuda")[:, :, 1]
    running = torch.ones(rows, dtype=torch.uint8, device="cuda")
    mask = torch.ones(rows, 1, dtype=torch.bool, device="cuda")
    block, projection_block = cuda_kernels._block(lstm_dim), cuda_kernels._block(projection_dim)

    def recurrent():
        torch.baddbmm(gate_input, hidden, layer.recurrent_weight, out=gates)

    def cell_kernel():
        triton_lstm_kernels.cell_step_kernel[(2 * rows, -(-lstm_dim // block))](
            gates,
            cell,
            memory,
            running,
            rows,
            lstm_dim,
            lstm_dim // splits,
            3.0,
            HAS_CLIP=True,
            SPLITS=splits,
            BLOCK=block,
        )

    def projection():
        torch.bmm(memory, split_weight, out=projected)

    def hidden_kernel():
        triton_lstm_kernels.hidden_step_kernel[(2 * rows, -(-projection_dim // projection_block))](
            projected, hidden, output, output.stride(1), running, rows, projection_dim, 3.0,
            HAS_CLIP=True, SPLITS=splits, BLOCK=projection_block,
        )  # fmt: skip

    def fused_step():
        recurrent()
        cell_kernel()
        projection()
        hidden_kernel()

    inputs = torch.randn(2, rows, 1, projection_dim, device="cuda")

    def reference_step():  # the layer's own loop for one word (its input product included)
        layer(inputs, mask, cell, hidden)

    def fused_layer_step():
        cuda_kernels.fused_layer_forward(layer, inputs, mask, cell, hidden)

    with torch.no_grad():
        return {
            name: graph_time(work)
            for name, work in [
                ("recurrent product", recurrent),
                ("cell kernel", cell_kernel),
                ("projection product", projection),
                ("hidden kernel", hidden_kernel),
                ("fused step", fused_step),
                ("reference layer, one word", reference_step),
                ("fused layer, one word", fused_layer_step),
            ]
        }


def parse_sizes(description):
    """The command line of both profiles (sizes and rows); exact float32 products (TF32 off) from here on."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--lstm-dim", type=int, default=2048)
    parser.add_argument("--projection-dim", type=int, default=256)
    parser.add_argument("--rows", type=int, nargs="+", default=[32, 1])
    torch.backends.cuda.matmul.allow_tf32 = False
    return parser.parse_args()


def main():
    args = parse_sizes(__doc__.splitlines()[0])
    lstm_dim, projection_dim = args.lstm_dim, args.projection_dim
    layer = ElmoBiLstmLayer(projection_dim, lstm_dim, projection_dim, 3.0, 3.0).cuda()
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.normal_(0, 0.05)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; LSTM {lstm_dim}, projection {projection_dim}")
    for rows in args.rows:
        timings = step_timings(layer, rows)
        flops = {"recurrent product": 2 * 2 * rows * projection_dim * 4 * lstm_dim}
        flops["projection product"] = 2 * 2 * rows * lstm_dim * projection_dim
        print(f"rows {rows}:")
        for name, microseconds in timings.items():
            rate = f"  {flops[name] / microseconds / 1e6:7.2f} TFLOP/s" if name in flops else ""
            print(f"  {name:28s} {microseconds:8.2f} us{rate}")


if __name__ == "__main__":
    main()
