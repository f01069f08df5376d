"""Derived copies of weights, and the one rule that keeps every one of them fresh.

The fast paths compute with copies of the parameters laid out for their products: oneDNN-prepacked float32 and
bfloat16 weights, int8 weights, bfloat16 copies of the character CNN's filters, an `(out, in)` copy of the
projection (`cpu_kernels.py`), and the table of an `ElmoTokenCache` (`embedder.py`). Every such copy is made and
found through `derived_copy`, and `derived_copy` hands out a copy only under this rule:

**A copy is used only if the tensors it was made from have, at the first use of the copy in the current forward
pass, the same dtype, shape and device as when it was made, and the same content fingerprint.**

The fingerprint (`fingerprint`) is computed from the values themselves: each tensor viewed as a matrix (its last
dimension the columns) gives the sum of every column, each row weighted by a different factor (`1 + r / rows`), in
at least float32: one matrix-vector product.

Why this is sound:

- It looks at the values, not at how they were written. An optimizer step (plain, `foreach` or fused: the fused
  kernels write without moving the version counter), a write through `weight.data` (which has a version counter of
  its own: `p.data.copy_`, exponential moving averages through `p.data.mul_().add_()`), `load_state_dict` (with
  `assign=True` too), `.to(dtype)` and `.to(device)` round trips (a new storage, possibly at the old address),
  `from_pretrained` into an existing model, and any other writer (NumPy views, collective operations) all change
  the values, and every path reads the values. `requires_grad_` changes no value, and needs no new copy.
- A change is missed only if it keeps every weighted column sum. For a change of one value: one that rounding of
  its column's sum absorbs (below about 2^-24 times the column's summed magnitudes, so its effect on the outputs is
  of that order too). For several: changes that cancel exactly in every column under the row weights. Updates from
  gradients, averages and copies of other weights do not; a permutation of columns (gates reordered) moves values
  between sums, and one of rows (directions swapped) changes their weights, so both are seen.
- Nothing is kept from one pass to the next except the copy and the fingerprint it was made from: there is no
  invalidation to remember (no hook, no version counter bumped "where we remember to"), so no writer can be
  forgotten. Within one forward pass (`forward_pass`, opened by `ElmoModel.forward`) the weights are read as
  they were at the copy's first use: writing weights from another thread during a forward is a race in any case.
  `weights_held` extends one pass over several forwards for code that runs them back to back with nothing in
  between that could write a weight (`ElmoEmbedder`'s calls: its batches run inside one call, in this thread).

The cost: one read of each weight that has a copy, once per forward pass (one product; weights below float32 are
converted a block of rows at a time, so no float32 copy of a whole weight is allocated at each check). The copies
are read once per word or step, so the check is a small share of a batch's work; for a single short sentence it is
not (int8 reads the float32 weights it was quantized from), which is why `ElmoEmbedder` runs each call's batches
inside one `weights_held` block (`benchmarks/RESULTS.md` gives the cost per mode). A call outside any forward pass
checks at every call.

The copies are kept by owner (a module) in a weak mapping: they go with the module, and copying, saving or moving a
model never meets them.
"""

import contextlib
import contextvars
import functools
import itertools
import weakref

import torch

# The current forward pass of this thread or task (None outside one); each pass gets a new number.
_CURRENT_PASS = contextvars.ContextVar("elmo_hf_weight_pass", default=None)
# True inside a held pass (`weights_held`): the forward passes within join it.
_HELD = contextvars.ContextVar("elmo_hf_weights_held", default=False)
# Elements of a weight below float32 converted to float32 at a time for its fingerprint (a 4 MiB buffer).
_BLOCK_ELEMENTS = 1 << 20
_PASS_NUMBERS = itertools.count(1)

# owner module -> {key: _Entry}
_COPIES = weakref.WeakKeyDictionary()


class _Entry:
    __slots__ = ("copy", "checked_in", "description", "fingerprints")

    def __init__(self, copy, description, fingerprints, checked_in):
        self.copy = copy
        self.description = description  # (dtype, shape, device) of each source
        self.fingerprints = fingerprints
        self.checked_in = checked_in  # the forward pass whose first use found the sources unchanged


@contextlib.contextmanager
def forward_pass(held=False):
    """Within this context each copy is checked at its first use only (the weights do not change during a
    forward). Nested passes are new passes, except inside a `held` one, whose pass they join."""
    if _HELD.get():
        yield
        return
    pass_token, held_token = _CURRENT_PASS.set(next(_PASS_NUMBERS)), _HELD.set(held)
    try:
        yield
    finally:
        _HELD.reset(held_token)
        _CURRENT_PASS.reset(pass_token)


def weights_held():
    """One forward pass spanning every forward in the block: each copy is checked at its first use in the block
    only. For library code that runs forwards back to back and runs no caller's code in between (a batch loop),
    so that nothing can write the weights during the block; never around code that takes a callback."""
    return forward_pass(held=True)


def fingerprint(tensor):
    """The content fingerprint of `tensor`: with `tensor` viewed as a matrix `(rows, columns)` (its last dimension the
    columns; a 0- or 1-D tensor one row), the sum of each column with row `r` weighted by `1 + r / rows`: one
    product, `(columns,)`, computed in float32 (float64 for float64 tensors)."""
    values = tensor.detach()
    matrix = values.reshape(1, -1) if values.dim() < 2 else values.reshape(-1, values.shape[-1])  # (rows, columns)
    if matrix.dtype in (torch.float32, torch.float64):
        return _row_weights(matrix.shape[0], matrix.dtype, matrix.device) @ matrix  # (columns,)
    # Sums in bfloat16 would round changes away: float32 sums. On a CPU a block of rows is converted at a time, into
    # one small buffer; a float32 copy of the whole weight would be a new allocation at every check, whose page
    # faults cost far more than the product (on CUDA the caching allocator reuses memory).
    row_weights = _row_weights(matrix.shape[0], torch.float32, matrix.device)
    if matrix.device.type != "cpu":
        return row_weights @ matrix.float()
    block_rows = max(1, _BLOCK_ELEMENTS // max(1, matrix.shape[1]))
    block = torch.empty(min(block_rows, matrix.shape[0]), matrix.shape[1])
    sums = torch.zeros(matrix.shape[1])
    for start in range(0, matrix.shape[0], block_rows):
        rows = matrix[start : start + block_rows]
        sums.addmv_(block[: rows.shape[0]].copy_(rows).t(), row_weights[start : start + rows.shape[0]])
    return sums  # (columns,)


@functools.lru_cache(maxsize=64)
def _row_weights(rows, dtype, device):
    return 1 + torch.arange(rows, dtype=dtype, device=device) / rows  # (rows,), all different


def _describe(tensor):
    return (tensor.dtype, tuple(tensor.shape), tensor.device)


def _same(fingerprints, others):
    """Bit for bit (a weight holding NaN is then equal to itself)."""
    return all(torch.equal(_bits(a), _bits(b)) for a, b in zip(fingerprints, others))


def _bits(values):
    return values.view(torch.int64 if values.element_size() == 8 else torch.int32)


def derived_copy(owner, key, sources, build):
    r"""
    The copy `key` of `owner` made by `build()` from the tensors `sources`, made again whenever the rule of this
    module says the kept one may be stale.

    Args:
        owner (`nn.Module`): whose copy it is (the copies go with it).
        key (hashable): which copy (e.g. `("recurrent_weight", "onednn")`).
        sources (sequence of tensors): every tensor the copy is computed from (weights and biases).
        build (callable): makes the copy from the sources' current values.

    Returns:
        the copy.
    """
    current_pass = _CURRENT_PASS.get()
    copies = _COPIES.setdefault(owner, {})
    entry = copies.get(key)
    if entry is not None and current_pass is not None and entry.checked_in == current_pass:
        return entry.copy
    description = [_describe(source) for source in sources]
    fingerprints = [fingerprint(source) for source in sources]
    if entry is not None and entry.description == description and _same(entry.fingerprints, fingerprints):
        entry.checked_in = current_pass
        return entry.copy
    copy = build()
    copies[key] = _Entry(copy, description, fingerprints, current_pass)
    return copy
