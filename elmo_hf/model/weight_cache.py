"""Derived copies of weights, and the one rule that keeps every one of them fresh.

The fast paths compute with copies of the parameters laid out for their products: oneDNN-prepacked float32 and
bfloat16 weights, fbgemm-packed int8 weights (from a quantized model's own int8 weights and scales), bfloat16 copies
of the character CNN's filters, an `(out, in)` copy of the projection (`cpu_kernels.py`), and the table of an
`ElmoTokenCache` (`embedder.py`). Every such copy is made and found through `derived_copy`, and `derived_copy`
hands out a copy only under this rule:

**A copy is used only if the tensors it was made from have, at the first use of the copy in the current forward
pass, the same dtype, shape and device as when it was made, and the same content fingerprint.**

The fingerprint (`fingerprint`) is computed from the values themselves: the tensor's bytes, read as 64-bit integers
("words"), summed modulo 2**64 in blocks of 64 words (512 bytes). Integer sums, so no rounding: one pass over the
memory, as fast as a copy.

Why this is sound:

- It looks at the values, not at how they were written. An optimizer step (plain, `foreach` or fused: the fused
  kernels write without moving the version counter), a write through `weight.data` (which has a version counter of
  its own: `p.data.copy_`, exponential moving averages through `p.data.mul_().add_()`), `load_state_dict` (with
  `assign=True` too), `.to(dtype)` and `.to(device)` round trips (a new storage, possibly at the old address),
  `from_pretrained` into an existing model, and any other writer (NumPy views, collective operations) all change
  the values, and every path reads the values. `requires_grad_` changes no value, and needs no new copy.
- Every change of one value is seen, however small: its word changes by some `d`, not 0 modulo 2**64, and so does
  its block's sum. Changes of several values are missed only where, in every block, their words' changes add up to
  exactly 0 modulo 2**64. Updates from gradients, averages, casts and copies of other weights have no such relation
  (for changes unrelated to the block's sum, one block in 2**64 would keep it). The one blind spot is order within a
  block: whole 8-byte words exchanged inside one 512-byte block. Values exchanged inside a word (two float32, four
  bfloat16) change it, and values moved between blocks change two sums: reordered gates, swapped directions or rows,
  and hidden units moved to another block are seen.
- Nothing is kept from one pass to the next except the copy and the fingerprint it was made from: there is no
  invalidation to remember (no hook, no version counter bumped "where we remember to"), so no writer can be
  forgotten. Within one forward pass (`forward_pass`, opened by `ElmoModel.forward`) the weights are read as
  they were at the copy's first use: writing weights from another thread during a forward is a race in any case.
  `weights_held` extends one pass over several forwards for code that runs them back to back with nothing in
  between that could write a weight (`ElmoEmbedder`'s calls: its batches run inside one call, in this thread).

The cost: one read of each weight that has a copy, once per forward pass. The copies are read once per word or step,
so the check is a small share of a batch's work; for a single short sentence it is a larger one (a quantized model's
check reads its int8 weights, a byte a weight), which is why `ElmoEmbedder` runs each call's batches inside one
`weights_held` block (`benchmarks/RESULTS.md` gives the cost per mode). A call outside any forward pass checks at
every call.

The copies are kept by owner (a module) in a weak mapping: they go with the module, and copying, saving or moving a
model never meets them.
"""

import contextlib
import contextvars
import itertools
import weakref
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import TypeVar, cast

import torch
from torch import nn

# What a copy is: a tensor, a tuple of tensors, packed int8 weights (`cpu_kernels.py`), as its `build` makes it.
_Copy = TypeVar("_Copy")
# (dtype, shape, device) of a tensor a copy was made from.
_Description = tuple[torch.dtype, tuple[int, ...], torch.device]

# The current forward pass of this thread or task (None outside one); each pass gets a new number.
_CURRENT_PASS: contextvars.ContextVar[int | None] = contextvars.ContextVar("elmo_hf_weight_pass", default=None)
# True inside a held pass (`weights_held`): the forward passes within join it.
_HELD: contextvars.ContextVar[bool] = contextvars.ContextVar("elmo_hf_weights_held", default=False)
# 64-bit words summed together in a fingerprint (512 bytes): at 64, the sums read memory as fast as a copy does, and
# the fingerprint is 1/64 of the weight's size (at 8 its sums ran 4x slower, at 512 no faster).
_BLOCK_WORDS = 64
_PASS_NUMBERS = itertools.count(1)

# owner module -> {key: _Entry}
_COPIES: "weakref.WeakKeyDictionary[nn.Module, dict[Hashable, _Entry]]" = weakref.WeakKeyDictionary()


class _Entry:
    __slots__ = ("copy", "checked_in", "description", "fingerprints")

    def __init__(
        self,
        copy: object,
        description: list[_Description],
        fingerprints: list[torch.Tensor],
        checked_in: int | None,
    ) -> None:
        self.copy = copy
        self.description = description  # (dtype, shape, device) of each source
        self.fingerprints = fingerprints
        self.checked_in = checked_in  # the forward pass whose first use found the sources unchanged


@contextlib.contextmanager
def forward_pass(held: bool = False) -> Iterator[None]:
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


def weights_held() -> contextlib.AbstractContextManager[None]:
    """One forward pass spanning every forward in the block: each copy is checked at its first use in the block
    only. For library code that runs forwards back to back and runs no caller's code in between (a batch loop),
    so that nothing can write the weights during the block; never around code that takes a callback."""
    return forward_pass(held=True)


def fingerprint(tensor: torch.Tensor) -> torch.Tensor:
    """The content fingerprint of `tensor`: its bytes (in memory order) read as 64-bit integers ("words"), summed
    modulo 2**64 a block of `_BLOCK_WORDS` words (512 bytes) at a time, followed by the last words and bytes that fill
    no block, each as it is: `(ceil(bytes / 512) - 1 + tail,)` int64. Integer sums, so exact: any change of a word
    changes its block's sum."""
    data = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    if data.storage_offset() % 8:  # a view whose bytes start off an 8-byte boundary: read from an aligned copy
        data = data.clone()
    words = data[: data.numel() // 8 * 8].view(torch.int64)
    in_blocks = words.numel() // _BLOCK_WORDS * _BLOCK_WORDS
    return torch.cat(
        [
            words[:in_blocks].view(-1, _BLOCK_WORDS).sum(dim=1),  # (blocks,), wrapping modulo 2**64
            words[in_blocks:],
            data[words.numel() * 8 :].to(torch.int64),
        ]
    )


def _describe(tensor: torch.Tensor) -> _Description:
    return (tensor.dtype, tuple(tensor.shape), tensor.device)


def _same(fingerprints: Sequence[torch.Tensor], others: Sequence[torch.Tensor]) -> bool:
    return all(torch.equal(a, b) for a, b in zip(fingerprints, others))


def derived_copy(owner: nn.Module, key: Hashable, sources: Sequence[torch.Tensor], build: Callable[[], _Copy]) -> _Copy:
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
        return cast(_Copy, entry.copy)  # made by this key's `build`, as the one below
    description = [_describe(source) for source in sources]
    fingerprints = [fingerprint(source) for source in sources]
    if entry is not None and entry.description == description and _same(entry.fingerprints, fingerprints):
        entry.checked_in = current_pass
        return cast(_Copy, entry.copy)
    copy = build()
    copies[key] = _Entry(copy, description, fingerprints, current_pass)
    return copy


def drop_copies(owner: nn.Module, keys: Iterable[Hashable]) -> None:
    """Forget `owner`'s copies `keys` (those a change of the model's layout left unread, e.g. the float32 weights'
    copies once the weights are int8: `ElmoModel.quantize_weights`)."""
    copies = _COPIES.get(owner, {})
    for key in keys:
        copies.pop(key, None)
