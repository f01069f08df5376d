"""Which int8 product is fastest on this CPU, on ELMo's shapes: one row (a sentence's per-step products) and 32.

    python benchmarks/int8_operators.py

Times, one thread, the float32 product and each int8 candidate on the original and medium sizes' recurrent `(in
512, out 16384)` / `(256, 8192)` and projection `(4096, 512)` / `(2048, 256)` weights, in microseconds (median of 5
timings): `torch.ops.quantized.linear_dynamic` on fbgemm-packed weights (inputs quantized on the fly, what
`cpu_kernels.py` runs), `torch._weight_int8pack_mm` (int8 weights, float32 or bfloat16 inputs) and `torch._int_mm`
(int8 x int8 -> int32, with the per-row input quantization it needs; its CPU kernel takes 17 rows or more, so fewer
are padded). Prints the CPU model and capability.
"""

import time
import warnings

import torch
from benchmark_utils import cpu_model


def microseconds(function):
    function()
    timings = []
    for _ in range(5):
        start, calls = time.perf_counter(), 0
        while time.perf_counter() - start < 0.15:
            function()
            calls += 1
        timings.append((time.perf_counter() - start) / calls)
    return sorted(timings)[2] * 1e6


def candidates(inputs, weight):
    """name -> a function computing `inputs @ weight.t()` that way."""
    out_features, in_features = weight.shape
    scales = weight.abs().amax(dim=1) / 127
    values = torch.round(weight / scales.unsqueeze(1)).to(torch.int8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        quantized = torch._make_per_channel_quantized_tensor(
            values, scales.double(), torch.zeros(out_features, dtype=torch.long), 0
        )
    packed = torch.ops.quantized.linear_prepack(quantized, None)
    values_in_out = values.t().contiguous()
    rows = inputs.shape[0]

    def int_mm():
        input_scales = inputs.abs().amax(dim=1, keepdim=True) / 127
        quantized_inputs = torch.round(inputs / input_scales).to(torch.int8)
        if rows < 17:
            quantized_inputs = torch.cat([quantized_inputs, quantized_inputs.new_zeros(17 - rows, in_features)])
        return torch._int_mm(quantized_inputs, values_in_out)[:rows].float() * input_scales * scales

    bfloat16_inputs, bfloat16_scales = inputs.bfloat16(), scales.bfloat16()
    return {
        "float32 matmul": lambda: inputs @ weight.t(),
        "quantized.linear_dynamic (fbgemm)": lambda: torch.ops.quantized.linear_dynamic(inputs, packed, False),
        "_weight_int8pack_mm float32": lambda: torch._weight_int8pack_mm(inputs, values, scales),
        "_weight_int8pack_mm bfloat16": lambda: torch._weight_int8pack_mm(bfloat16_inputs, values, bfloat16_scales),
        "_int_mm": int_mm,
    }


def main():
    torch.set_num_threads(1)
    print(f"CPU: {cpu_model()}, capability {torch.backends.cpu.get_cpu_capability()}, one thread; microseconds")
    for in_features, out_features in ((512, 16384), (4096, 512), (256, 8192), (2048, 256)):
        weight = torch.randn(out_features, in_features, generator=torch.Generator().manual_seed(0)) * 0.05
        for rows in (1, 32):
            inputs = torch.randn(rows, in_features)
            timed = {name: microseconds(function) for name, function in candidates(inputs, weight).items()}
            print(
                f"in {in_features} out {out_features} rows {rows}: "
                + ", ".join(f"{n} {t:.0f}" for n, t in timed.items())
            )


if __name__ == "__main__":
    main()
