r"""Vertex partitions as explicit data: who owns which block of rows.

A :class:`RowPartition` relabels vertices so that every part is contiguous: ``perm[new] = old`` and
``inv[old] = new``; part ``k`` owns new ids ``bounds[k] : bounds[k+1]`` (parts may differ in size, may be
empty only where the caller allows it). The permuted matrix is :math:`M' = P M P^\mathsf{T}` with
:math:`M'_{ab} = M_{\mathrm{perm}[a], \mathrm{perm}[b]}`.

The layout rules the algorithms, the byte and memory models and the trainer share are written here once:
the 1.5D stage chunks (:func:`stage_chunks`), the SUMMA vertex blocks and panels (:class:`SummaGeometry`) and
the Plexus layer roles (:func:`plexus_roles`); the block counts per algorithm are in
:mod:`gridgnn.parallel.registry`. Each plan documents, per tensor, the rows/columns it holds and the axes it is
sharded, replicated or partial along (module docstrings of ``parallel/blockrow.py``, ``summa.py``,
``plexus.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..errors import GridGnnError


@dataclass(frozen=True)
class RowPartition:
    """Contiguous row blocks after relabeling.

    Args:
        perm: ``int64[n]``, ``perm[new] = old``.
        bounds: ``int64[k+1]``, block ``i`` is new ids ``bounds[i]:bounds[i+1]``.
        method: how the partition was made (for reports).
    """

    perm: np.ndarray
    bounds: np.ndarray
    method: str = "identity"

    @property
    def n(self) -> int:
        return int(self.perm.size)

    @property
    def parts(self) -> int:
        return int(self.bounds.size - 1)

    def sizes(self) -> np.ndarray:
        return np.diff(self.bounds)

    def block(self, k: int) -> slice:
        return slice(int(self.bounds[k]), int(self.bounds[k + 1]))

    def part_of_old(self) -> np.ndarray:
        """Part id of every vertex in original order (the METIS partition-file format)."""
        part_new = np.repeat(np.arange(self.parts, dtype=np.int64), self.sizes())
        out = np.empty(self.n, dtype=np.int64)
        out[self.perm] = part_new
        return out

    def permute_matrix(self, mat: sp.csr_matrix) -> sp.csr_matrix:
        """:math:`P M P^\\mathsf{T}` in the new labels (CSR, sorted indices)."""
        out = sp.csr_matrix(mat)[self.perm][:, self.perm].tocsr()
        out.sort_indices()
        return out

    # ------------------------------------------------------------------ constructors
    @classmethod
    def identity(cls, n: int, parts: int) -> "RowPartition":
        return cls(np.arange(n, dtype=np.int64), even_bounds(n, parts), "identity")

    @classmethod
    def random(cls, n: int, parts: int, seed: int = 0) -> "RowPartition":
        """Random permutation, then equal-size contiguous blocks (the default of the oblivious algorithms)."""
        rng = np.random.default_rng(seed)
        return cls(rng.permutation(n).astype(np.int64), even_bounds(n, parts), "random")

    @classmethod
    def from_parts(cls, part: np.ndarray, parts: int, method: str = "file") -> "RowPartition":
        """From a vertex → part map (original order). Relabeling is stable: within a part, original order."""
        part = np.asarray(part).reshape(-1)
        if part.size and (not np.issubdtype(part.dtype, np.integer)):
            raise GridGnnError("partition entries must be integers")
        part = part.astype(np.int64)
        if part.size and (part.min() < 0 or part.max() >= parts):
            raise GridGnnError(f"partition names part {int(part.max() if part.max() >= parts else part.min())}, "
                               f"valid parts are 0..{parts - 1}")
        perm = np.argsort(part, kind="stable").astype(np.int64)
        counts = np.bincount(part, minlength=parts)
        bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(perm, bounds, method)


def even_bounds(n: int, parts: int) -> np.ndarray:
    """Block boundaries of ``parts`` contiguous blocks of sizes differing by at most one (larger first)."""
    if parts < 1:
        raise GridGnnError(f"number of parts must be positive, got {parts}")
    base, extra = divmod(n, parts)
    sizes = np.full(parts, base, dtype=np.int64)
    sizes[:extra] += 1
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def block_range(bounds, k: int) -> tuple[int, int]:
    """``(start, stop)`` of block ``k`` of ``bounds``."""
    return int(bounds[k]), int(bounds[k + 1])


def stage_chunks(blocks: int, c: int) -> list[list[int]]:
    """1.5D: the source blocks each process column handles — ``range(blocks)`` split into ``c`` contiguous chunks
    whose sizes differ by at most one (CAGNET gives the extra stages to the last column; we spread them)."""
    return [list(map(int, a)) for a in np.array_split(np.arange(blocks), c)]


PLEXUS_ROLES = (("x", "y", "z"), ("z", "x", "y"), ("y", "z", "x"))


def plexus_roles(layer: int) -> tuple[str, str, str]:
    """Plexus §3.2: the (a, b, c) axes of layer ``layer`` rotate so that each output is the next input."""
    return PLEXUS_ROLES[layer % 3]


class SummaGeometry:
    r"""Blocks and panels of a ``pr × pc × z`` grid for ``n`` vertices (see the module docstring).

    Attributes:
        fine: ``even_bounds(n, pr·z)``; ``B(i, k)`` = ``fine[i·z + k] : fine[i·z + k + 1]``.
        panels[k]: list of ``(v0, v1, i_owner, j_owner)`` for fiber layer ``k``.
    """

    def __init__(self, n: int, pr: int, pc: int, z: int):
        if pr * z > n:
            raise GridGnnError(f"grid needs {pr * z} vertex blocks but the graph has only {n} vertices")
        self.n, self.pr, self.pc, self.z = n, pr, pc, z
        self.fine = even_bounds(n, pr * z)
        self.panels = []
        for k in range(z):
            ranges = [self.block(i, k) for i in range(pr)]
            total = sum(b - a for a, b in ranges)
            cuts = even_bounds(total, pc)  # positions in the concatenated V_k sequence
            out, pos = [], 0
            for i, (a, b) in enumerate(ranges):
                start = a
                while start < b:
                    off = pos + (start - a)
                    j = int(np.searchsorted(cuts, off, side="right") - 1)
                    end = min(b, a + (int(cuts[j + 1]) - pos))
                    out.append((start, end, i, j))
                    start = end
                pos += b - a
            self.panels.append(out)

    def block(self, i: int, k: int) -> tuple[int, int]:
        return block_range(self.fine, i * self.z + k)

    def rows(self, i: int) -> tuple[int, int]:
        return int(self.fine[i * self.z]), int(self.fine[(i + 1) * self.z])

    def fiber_bounds(self, i: int) -> np.ndarray:
        """Boundaries of ``B(i, 0..z-1)`` relative to the start of ``R_i``."""
        return self.fine[i * self.z:(i + 1) * self.z + 1] - self.fine[i * self.z]
