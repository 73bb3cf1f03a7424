r"""An algorithm of your own, in one file: CAGNET's 1D (Algorithm 1) with the stage loop run backwards — every rank
fetches the source blocks from the last to the first. The same data movement in another summation order: it
lays tensors out as the block-row family does, so that family's layout checks, byte model and memory model apply
to it unchanged, and it trains equal to ``--algo 1d`` (within float rounding).

.. code-block:: bash

    gridgnn train --algo examples.reversed_1d:REVERSED_1D --nproc 4 --epochs 20

From Python, importing this module registers it: ``gridgnn.TrainConfig(algo="1d-reversed", ...)``.
"""
from __future__ import annotations

from gridgnn.parallel import Algorithm, register
from gridgnn.parallel.blockrow import RowBlockPlan, make_graph


def build_reversed_1d(spec, comm, source, dims, *, rows, dtype, device, **_):
    """This rank's plan: its block row of the matrix, the source blocks visited from the last to the first."""
    grid = comm.grid
    p = grid.size("p")
    graph = make_graph(comm, source, rows, grid.rank("p"), fetch_axis="p", stages=list(range(p))[::-1],
                       reduce_axis=None, sparsity_aware=False, dtype=dtype, device=device)
    return RowBlockPlan(spec.name, graph, rows, grid.rank("p"), "p", comm=comm, source=source)


REVERSED_1D = register(Algorithm("1d-reversed", "1d", "block-row", paper="CAGNET Alg. 1, stages reversed",
                                 build=build_reversed_1d))
