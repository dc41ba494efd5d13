"""Preallocated buffers of the fused serving pass (speed; issue 19).

Two costs of element-wise numpy passes over blocks of rows are not arithmetic:

* **Allocation.** A block's temporary of 16384 float64 rows is 128 KiB, glibc's default
  ``mmap`` threshold: until a larger block is freed, every such temporary is mapped and
  unmapped, its pages faulted in (zeroed by the kernel) again for every block. The pass
  therefore takes its temporaries from a :class:`Scratch` made once per thread and reused
  from block to block.
* **4K aliasing.** A load whose address equals, modulo 4096, that of a recent store waits
  for it: ``c = a * b`` runs at half speed when the three arrays start at the same offset
  within a page, as same-sized allocations made one after the other do. Every buffer here
  starts :data:`STAGGER_BYTES` further into its page than the one before.

The numbers do not change (the same operations on the same values; only where they are
written).
"""

from __future__ import annotations

import numpy as np

#: The page size of the 4K-aliasing rule (the low 12 address bits) [bytes].
PAGE_BYTES = 4096
#: Offset of the first buffer within its page [bytes]: away from offset 16, where
#: large arrays allocated by ``malloc`` (``mmap`` + a 16-byte header) start.
FIRST_OFFSET_BYTES = 1024
#: Offset between successive buffers within their pages [bytes] (a multiple of 32, the
#: AVX2 vector width: 25 distinct offsets per page).
STAGGER_BYTES = 160


def staggered(rows: int, slot: int, dtype=float, zero: bool = False) -> np.ndarray:
    """A contiguous array of ``rows`` elements starting at ``FIRST_OFFSET_BYTES + slot *
    STAGGER_BYTES`` modulo :data:`PAGE_BYTES` (a view of an allocation one page longer:
    the same size for every slot, so that ``malloc`` recycles it from call to call);
    ``zero``: zero-filled."""
    item = np.dtype(dtype).itemsize
    raw = (np.zeros if zero else np.empty)(rows * item + PAGE_BYTES, dtype=np.uint8)
    start = (FIRST_OFFSET_BYTES + slot * STAGGER_BYTES - raw.ctypes.data) % PAGE_BYTES
    return raw[start:start + rows * item].view(dtype)


class Scratch:
    """A thread's temporaries for blocks of at most ``rows`` rows, allocated on first use
    (staggered) and reused afterwards: one buffer per name (:meth:`__call__`), and a pool
    (:meth:`new`, :meth:`free`) that lends the buffer freed last first, the one most likely
    still in the CPU cache (a pass whose output lands in cache runs about 1.5x faster)."""

    def __init__(self, rows: int):
        self.rows = rows
        self._named: dict[str, np.ndarray] = {}
        self._pool: list[np.ndarray] = []      # every pool buffer
        self._free: list[np.ndarray] = []      # those not lent, the last freed at the end
        self._lent: dict[int, np.ndarray] = {}  # id of a lent view -> its buffer

    def _staggered(self) -> np.ndarray:
        return staggered(self.rows, len(self._named) + len(self._pool))

    def __call__(self, name: str, n: int) -> np.ndarray:
        """The buffer of ``name``, its first ``n`` elements (its content: what was left)."""
        buf = self._named.get(name)
        if buf is None:
            buf = self._named[name] = self._staggered()
        return buf[:n]

    def stack(self, name: str, k: int, n: int) -> np.ndarray:
        """The buffer of ``name`` as ``k`` rows of ``n`` elements (its content: what was left):
        a ``(k, n)`` view whose rows start :data:`STAGGER_BYTES` apart within their pages,
        so that one numpy call computes ``k`` row-wise results (fewer calls per block)."""
        buf = self._named.get(name)
        if buf is None or buf.shape[0] < k:
            stride = self.rows + STAGGER_BYTES // 8
            slot = len(self._named) + len(self._pool)
            buf = self._named[name] = staggered(k * stride, slot).reshape(k, stride)
        return buf[:k, :n]

    def new(self, n: int) -> np.ndarray:
        """A pool buffer's first ``n`` elements (content: what was left), lent until :meth:`free`."""
        if self._free:
            buf = self._free.pop()
        else:
            buf = self._staggered()
            self._pool.append(buf)
        view = buf[:n]
        self._lent[id(view)] = buf
        return view

    def free(self, *views: np.ndarray) -> None:
        """Give back views lent by :meth:`new` (each once; KeyError otherwise)."""
        for view in views:
            self._free.append(self._lent.pop(id(view)))

    def reset(self) -> None:
        """Every pool buffer back (what a block did not free)."""
        self._lent.clear()
        if len(self._free) != len(self._pool):
            self._free = list(self._pool)
