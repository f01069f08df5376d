"""The Triton kernels of the fused LSTM step (`cuda_kernels.py` launches them; its docstring gives the math).

Imported only by `cuda_kernels.triton_kernels`, at the first use of the fused step: a CPU-only process never imports
Triton. Triton reads TRITON_INTERPRET when a kernel is defined, so the CPU tests set it and reload this module.
"""

try:  # PyTorch's CUDA wheels bring Triton; without it the graphs run the reference step
    import triton
    import triton.language as tl
except ImportError:
    triton = None

if triton is not None:
    # sigmoid and tanh written out: Triton's own `tl.sigmoid` is a jitted function that the interpreter, switched on
    # after Triton was imported, cannot call; both are exact to float32 rounding, and exact limits where exp overflows.
    @triton.jit
    def _sigmoid(x):
        return 1.0 / (1.0 + tl.exp(-x))

    @triton.jit
    def _tanh(x):
        return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)

    @triton.jit
    def cell_step_kernel(
        gates,
        cell,
        memory,
        running,
        batch,
        lstm_dim,
        split_width,
        cell_clip,
        HAS_CLIP: tl.constexpr,
        SPLITS: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        # One program per (direction * batch + row, block of BLOCK cell columns). gates: (2 * batch, 4 * lstm_dim)
        # in the order i, f, g, o; cell: (2 * batch, lstm_dim); memory: (2 * SPLITS, batch, split_width), the
        # columns of each direction cut into SPLITS slices; running: (batch,) uint8.
        row = tl.program_id(0)
        columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = columns < lstm_dim
        row_gates = gates + row * 4 * lstm_dim + columns
        input_gate = _sigmoid(tl.load(row_gates, mask=inside).to(tl.float32))
        forget_gate = _sigmoid(tl.load(row_gates + lstm_dim, mask=inside).to(tl.float32))
        candidate = _tanh(tl.load(row_gates + 2 * lstm_dim, mask=inside).to(tl.float32))
        output_gate = _sigmoid(tl.load(row_gates + 3 * lstm_dim, mask=inside).to(tl.float32))
        row_cell = cell + row * lstm_dim + columns
        new_cell = forget_gate * tl.load(row_cell, mask=inside).to(tl.float32) + input_gate * candidate
        if HAS_CLIP:
            new_cell = tl.minimum(tl.maximum(new_cell, -cell_clip), cell_clip)
        direction, batch_row = row // batch, row % batch
        split, split_column = columns // split_width, columns % split_width
        row_memory = memory + ((direction * SPLITS + split) * batch + batch_row) * split_width + split_column
        tl.store(row_memory, (output_gate * _tanh(new_cell)).to(memory.dtype.element_ty), mask=inside)
        # A padded row keeps its cell: no column of it is stored.
        stored_columns = tl.where(tl.load(running + batch_row) != 0, lstm_dim, 0)
        tl.store(row_cell, new_cell.to(cell.dtype.element_ty), mask=columns < stored_columns)

    @triton.jit
    def hidden_step_kernel(
        projected,
        hidden,
        output,
        output_row_stride,
        running,
        batch,
        projection_dim,
        proj_clip,
        HAS_CLIP: tl.constexpr,
        SPLITS: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        # One program per (direction * batch + row, block of BLOCK columns). projected: (2 * SPLITS, batch,
        # projection_dim), each slice's share of m_t P; hidden: (2 * batch, projection_dim); output: the step's
        # (2 * batch, projection_dim) slice of the layer's output, rows output_row_stride apart.
        row = tl.program_id(0)
        columns = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = columns < projection_dim
        direction, batch_row = row // batch, row % batch
        shares = projected + (direction * SPLITS * batch + batch_row) * projection_dim + columns  # the first slice's
        new_hidden = tl.load(shares, mask=inside).to(tl.float32)
        for split in tl.static_range(1, SPLITS):
            new_hidden += tl.load(shares + split * batch * projection_dim, mask=inside).to(tl.float32)
        if HAS_CLIP:
            new_hidden = tl.minimum(tl.maximum(new_hidden, -proj_clip), proj_clip)
        is_running = tl.load(running + batch_row) != 0
        # A padded row keeps its hidden state (no column stored) and outputs zeros.
        stored_columns = tl.where(is_running, projection_dim, 0)
        row_hidden = hidden + row * projection_dim + columns
        tl.store(row_hidden, new_hidden.to(hidden.dtype.element_ty), mask=columns < stored_columns)
        step_output = tl.where(is_running, new_hidden, 0.0)
        tl.store(output + row * output_row_stride + columns, step_output.to(output.dtype.element_ty), mask=inside)
