r"""Process grids on ``torch.distributed.device_mesh`` with named axes.

=========  ======================  =====================================================
kind       mesh shape              axis names (what varies along the axis)
=========  ======================  =====================================================
``1d``     ``(P,)``                ``("p",)`` — the block row
``1.5d``   ``(P/c, c)``            ``("row", "rep")`` — block row, replica
``2d``     ``(pr, pc)``            ``("row", "col")``
``3d``     ``(x, y, z)``           ``("x", "y", "z")``
=========  ======================  =====================================================

Global rank ``r`` sits at mesh coordinate ``unravel(r, shape)`` (row-major), so in 1.5D process
``P(i, j)`` is rank ``i·c + j``; its process row ``P(i, :)`` is the ``"rep"`` group and its process column
``P(:, j)`` the ``"row"`` group. Shapes are validated before any collective (:func:`grid_shape`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import GridGnnError

AXES = {"1d": ("p",), "1.5d": ("row", "rep"), "2d": ("row", "col"), "3d": ("x", "y", "z")}


def grid_shape(kind: str, world: int, *, replication: int = 1, shape: tuple[int, ...] | None = None
               ) -> tuple[int, ...]:
    """The mesh shape of grid ``kind`` for ``world`` processes; a clear error when it does not fit."""
    if world < 1:
        raise GridGnnError(f"need at least one process, got {world}")
    if kind not in AXES:
        raise GridGnnError(f"unknown grid kind {kind!r}; choose one of {', '.join(AXES)}")
    if kind == "1d":
        if shape is not None and tuple(shape) != (world,):
            raise GridGnnError(f"1D grid must be ({world},) for {world} processes, got {tuple(shape)}")
        return (world,)
    if kind == "1.5d":
        c = replication if shape is None else shape[1]
        if c < 1 or world % c:
            raise GridGnnError(f"replication c={c} must divide the number of processes P={world}")
        out = (world // c, c)
        if shape is not None and tuple(shape) != out:
            raise GridGnnError(f"1.5D grid {tuple(shape)} does not multiply to P={world}")
        return out
    want = len(AXES[kind])
    if shape is None:
        raise GridGnnError(f"{kind} grid needs an explicit shape of {want} factors")
    shape = tuple(int(s) for s in shape)
    if len(shape) != want or any(s < 1 for s in shape) or math.prod(shape) != world:
        raise GridGnnError(f"{kind} grid {','.join(map(str, shape))} does not fit P={world}: need {want} positive "
                           f"factors whose product is {world}")
    return shape


def ordered_factorizations(world: int, parts: int) -> list[tuple[int, ...]]:
    """Every ordered tuple of ``parts`` positive integers whose product is ``world``."""
    if parts == 1:
        return [(world,)]
    return [(d,) + rest for d in range(1, world + 1) if world % d == 0
            for rest in ordered_factorizations(world // d, parts - 1)]


def default_shape(kind: str, world: int) -> tuple[int, ...]:
    """The most square (2D) or most cubic (3D) factorization of ``world``, larger factors first."""
    if kind == "2d":
        a = max(d for d in range(1, int(math.isqrt(world)) + 1) if world % d == 0)
        return (world // a, a)
    if kind == "3d":
        best = None
        for x in range(1, world + 1):
            for y in range(1, world // x + 1):
                if world % (x * y) == 0:
                    s = tuple(sorted((x, y, world // (x * y)), reverse=True))
                    if best is None or max(s) - min(s) < max(best) - min(best):
                        best = s
        return best
    raise GridGnnError(f"no default shape for grid kind {kind!r}")


def coords_of(rank: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Mesh coordinate of global ``rank`` (row-major, as DeviceMesh lays ranks out)."""
    out = []
    for s in reversed(shape):
        out.append(rank % s)
        rank //= s
    return tuple(reversed(out))


def _group_options(backend: str, timeout):
    """Options of a new process group with ``timeout``: NCCL's own options type (torch refuses another one for
    it), the generic backend options otherwise (gloo)."""
    import torch.distributed as dist

    if backend == "nccl":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return options
    from torch._C._distributed_c10d import Backend

    return Backend.Options(backend, timeout=timeout)


@dataclass
class ProcessGrid:
    r"""A named process grid. ``mesh`` is a :class:`DeviceMesh` (``None`` for the single-process grid).

    Args:
        kind: ``"1d"``, ``"1.5d"``, ``"2d"``, ``"3d"`` or ``"single"``.
        shape: mesh shape, product = world size.
        names: axis names (see the module table).
        rank_: this process's global rank.
        mesh: the device mesh holding one process group per axis.
    """

    kind: str
    shape: tuple[int, ...]
    names: tuple[str, ...]
    rank_: int
    mesh: object | None = None

    @classmethod
    def single(cls) -> "ProcessGrid":
        return cls("single", (1,), ("p",), 0, None)

    @classmethod
    def build(cls, kind: str, device_type: str, *, replication: int = 1, shape=None,
              timeout_s: float | None = None) -> "ProcessGrid":
        """Create the mesh for the current process group (every rank calls this in the same order).

        ``timeout_s`` (``--timeout``): the process group of every axis smaller than the world is created with it,
        as the world group was (:class:`~gridgnn.distributed.launch.LaunchContext`); DeviceMesh otherwise gives them
        torch's default (30 minutes), and a stalled rank on a process row or fiber would hold its peers that long.
        A failure while the groups are made (a peer that ended) is a :class:`~gridgnn.errors.CommFailure`."""
        import datetime
        import inspect

        import torch
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        world = dist.get_world_size()
        shp = grid_shape(kind, world, replication=replication, shape=shape)
        kw = {}
        if timeout_s is not None and "backend_override" in inspect.signature(init_device_mesh).parameters:
            backend = dist.get_backend()  # (torch < 2.9 has no backend_override: its axis groups keep the default)
            timeout = datetime.timedelta(seconds=float(timeout_s))
            # axes smaller than the world (the world's group is the default one, created with the timeout already;
            # a 1D mesh thus creates no group at all) — and a world-wide axis too where DeviceMesh would not reuse
            # the default group but make a new one with torch's default timeout (gloo while CUDA is visible)
            fresh_world = backend == "gloo" and torch.cuda.is_available()
            # (options of their own per axis: making a group writes its name and ranks into the options given)
            kw["backend_override"] = {name: (backend, _group_options(backend, timeout))
                                      for name, size in zip(AXES[kind], shp) if size < world or fresh_world}
        try:
            mesh = init_device_mesh(device_type, shp, mesh_dim_names=AXES[kind], **kw)
        except RuntimeError as exc:  # creating a group is collective: a peer that ended (its input refused) fails it
            from ..errors import CommFailure

            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CommFailure(f"rank {dist.get_rank()}: creating the process groups of the {kind} grid failed "
                              f"(a peer rank went away?): {first[:200]}") from None
        return cls(kind, shp, AXES[kind], dist.get_rank(), mesh)

    @property
    def world_size(self) -> int:
        return math.prod(self.shape)

    @property
    def global_rank(self) -> int:
        return self.rank_

    def _axes(self, axis) -> tuple[str, ...]:
        axes = (axis,) if isinstance(axis, str) else tuple(axis)
        for a in axes:
            if a not in self.names:
                raise GridGnnError(f"grid {self.kind} has no axis {a!r} (axes: {', '.join(self.names)})")
        return axes

    def size(self, axis) -> int:
        return math.prod(self.shape[self.names.index(a)] for a in self._axes(axis))

    def rank(self, axis) -> int:
        """This process's coordinate along ``axis`` (for a tuple: the row-major flattened coordinate)."""
        coord = self.coords()
        out = 0
        for a in self._axes(axis):
            i = self.names.index(a)
            out = out * self.shape[i] + coord[i]
        return out

    def coords(self) -> tuple[int, ...]:
        return coords_of(self.rank_, self.shape)

    def group(self, axis):
        axes = self._axes(axis)
        if self.mesh is None:
            raise GridGnnError("the single-process grid has no process groups")
        if len(axes) == 1:
            return self.mesh.get_group(axes[0])
        if set(axes) == set(self.names) and list(axes) == [a for a in self.names if a in axes]:
            import torch.distributed as dist

            return dist.group.WORLD
        raise GridGnnError(f"flattened sub-grid {axes} is not supported; use one axis or all of them")

    def describe(self) -> str:
        return "x".join(map(str, self.shape))
