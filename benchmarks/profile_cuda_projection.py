"""The LSTM's per-step projection `m_t P` on a GPU at few rows, in the layouts it could take: the batched product as
the reference runs it, with a transposed weight, and split over the cell's columns (split-K) with the partial sums
added after. Timed as in profile_cuda_step.py (a CUDA graph of many calls).

    python benchmarks/profile_cuda_projection.py [--rows 32 1]
"""

import torch
from profile_cuda_step import graph_time, parse_sizes


def main():
    args = parse_sizes(__doc__.splitlines()[0])
    lstm_dim, projection_dim = args.lstm_dim, args.projection_dim
    weight = torch.randn(2, lstm_dim, projection_dim, device="cuda") * 0.05  # (in, out), as stored
    transposed = weight.transpose(1, 2).contiguous()  # (out, in)
    for rows in args.rows:
        memory = torch.randn(2, rows, lstm_dim, device="cuda")
        expected = torch.bmm(memory, weight)
        variants = {
            "bmm, (in, out) weight": lambda memory=memory: torch.bmm(memory, weight),
            "bmm, (out, in) weight": lambda memory=memory: torch.bmm(memory, transposed.transpose(1, 2)),
            "two mm, (in, out) weight": lambda memory=memory: (memory[0] @ weight[0], memory[1] @ weight[1]),
        }
        for splits in (4, 8, 16):
            width = lstm_dim // splits
            # The memory as the cell kernel could write it: (2 * splits, rows, width), split by cell columns.
            split_memory = memory.view(2, rows, splits, width).transpose(1, 2).reshape(2 * splits, rows, width)
            split_weight = weight.view(2 * splits, width, projection_dim)

            def split_k(split_memory=split_memory, split_weight=split_weight, splits=splits, rows=rows):
                partial = torch.bmm(split_memory, split_weight)  # (2 * splits, rows, projection_dim)
                return partial.view(2, splits, rows, projection_dim).sum(1)

            variants[f"split-K {splits}, bmm + sum"] = split_k
            variants[f"split-K {splits}, bmm only"] = lambda m=split_memory, w=split_weight: torch.bmm(m, w)
        flop = 2 * 2 * rows * lstm_dim * projection_dim
        print(f"rows {rows}:")
        with torch.no_grad():
            for name, work in variants.items():
                result = work()
                if isinstance(result, torch.Tensor) and result.shape == expected.shape:
                    difference = f"  max diff {(result - expected).abs().max().item():.1e}"
                else:
                    difference = ""
                microseconds = graph_time(work)
                print(f"  {name:28s} {microseconds:8.2f} us {flop / microseconds / 1e6:7.2f} TFLOP/s{difference}")


if __name__ == "__main__":
    main()
