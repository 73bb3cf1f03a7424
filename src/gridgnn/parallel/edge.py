r"""``--algo edge``: edge-parallel full-graph training — the edges split over the ``P`` ranks, every node tensor
replicated (the layout PyG's issue #10347 asks for: full-graph message passing where the vertices' embeddings fit
on each device and the edges do not, as in query-conditioned reasoners such as NBFNet or ULTRA).

**Layout.** The stored entries of :math:`\hat M` (rows = destinations, in the vertex order of ``--partition``:
``random`` by default, ``identity`` keeps the input's) are cut in CSR order into ``P`` contiguous ranges of
sizes differing by at most one; rank ``p`` holds range ``p``, an ``n × n`` pattern of about ``nnz/P`` edges (a
destination's edges may straddle two ranks). Node tensors and weights are *replicated*; edge tensors are
*sharded* by that split. It is the ``c = P`` limit of 1.5D (CAGNET SC'20 Alg. 2) on the grid
``("row", "rep")`` of shape ``1 × P`` — one row block, held by every rank — with the block's edges split
evenly by count instead of by source chunk, so the family reuses the block-row engine
(:class:`~gridgnn.parallel.blockrow.BlockRowGraph` with ``reduce_axis="rep"``) and its schedule
(:class:`~gridgnn.partition.layout.BlockRowSchedule`: no fetch, one all-reduce along ``"rep"``).

**Primitives** (as in :mod:`gridgnn.parallel.blockrow`, each on the local edges):

* ``spmm(e, X)`` — :math:`Y = \sum_p M_p(e) X`: the local product, then a ring all-reduce of the ``n × f``
  partial; backward :math:`dX = \sum_p M_p^\mathsf{T} dY` (all-reduced), ``de`` local (SDDMM of ``dY`` with ``X``).
* ``sddmm_add`` / ``sddmm_dot`` — local (both endpoints' rows are here); backward, the per-vertex sums of the
  edge gradients all-reduced.
* ``edge_softmax`` — the row max and the row sum of the exponentials over the local edges, all-reduced (max, then
  sum); backward one all-reduce of the rows' :math:`\sum_v \alpha_{uv} g_{uv}`.
* ``linear`` and the column reductions — local; weight gradients are whole on every rank (the trainer sums none).

*Communication* per rank and primitive with a gradient: ring all-reduces of ``n`` rows of the primitive's width
(``2 (P-1)/P · n w`` bytes sent and received each), none for the linear algebra of the layer; no set-up
exchange. Compared with 1D's ``(n - n/P) w`` per fetch it moves about twice as much per product, independent of
the graph's structure: it pays where the edges, not the vertices, exhaust a device's memory (high average degree,
edge features, per-edge attention tensors), and where a partition would be poor.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..partition import even_bounds
from .blockrow import BlockRowFamily, BlockRowGraph, RowBlockPlan
from .family import Algorithm, add_family


def edge_split(nnz: int, world: int) -> np.ndarray:
    """Bounds of the ``world`` contiguous ranges of the ``nnz`` stored entries (CSR order) the ranks hold."""
    return even_bounds(int(nnz), int(world))


def local_edges(mat: sp.csr_matrix, world: int, rank: int) -> sp.csr_matrix:
    """Rank ``rank``'s range of the entries of ``mat`` (CSR order), as an ``n × n`` CSR matrix."""
    mat = sp.csr_matrix(mat)
    mat.sum_duplicates()
    mat.sort_indices()
    b = edge_split(mat.nnz, world)
    lo, hi = int(b[rank]), int(b[rank + 1])
    ptr = np.clip(mat.indptr.astype(np.int64), lo, hi) - lo
    return sp.csr_matrix((mat.data[lo:hi], mat.indices[lo:hi], ptr), shape=mat.shape)


class EdgeFamily(BlockRowFamily):
    """Edge-parallel training (module docstring): one row block on a ``1 × P`` grid, edges split by count."""

    name = "edge"
    order = 40

    def build(self, spec, comm, source, dims, *, rows, dtype, device, block_rows, program):
        world = comm.grid.world_size
        local = local_edges(source.submatrix("rc", (0, rows.n), (0, rows.n)), world, comm.grid.rank("rep"))
        g = BlockRowGraph(comm, local, rows, 0, fetch_axis="row", stages=(0,), reduce_axis="rep", dtype=dtype,
                          device=device)
        return RowBlockPlan(spec.name, g, rows, 0, "row", comm=comm, source=source, copies=world)

    def takes_replication(self, spec) -> bool:
        return False

    def mesh_shape(self, spec, world: int, *, replication: int = 1, grid=None) -> tuple[int, ...]:
        return (1, int(world))

    def row_blocks(self, spec, world: int, replication: int = 1) -> int:
        return 1

    # what the block-row byte and memory models read: every rank multiplies the one block (stage 0) on its share
    def replicas(self, spec, world: int, replication: int = 1) -> int:
        return int(world)

    def stages(self, spec, world: int, replication: int = 1) -> list[tuple[int, ...]]:
        return [(0,)] * int(world)

    def rank_nnz(self, spec, nnz: int, world: int):
        return np.diff(edge_split(nnz, world))

    def candidates(self, spec, world, *, row_partitions, summa_orders, plexus_orders, reads_destinations):
        return [] if world == 1 else [(None, 1, "random")]


EDGE = add_family(EdgeFamily())
ALGORITHMS = (Algorithm("edge", "1.5d", EDGE, paper="edge-parallel (1.5D with c = P, edges split by count)"),)

__all__ = ["EDGE", "EdgeFamily", "edge_split", "local_edges"]
