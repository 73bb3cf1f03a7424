"""Training configuration: a kw-only dataclass that the CLI maps onto 1:1."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import GridGnnError

MODELS = ("gcn",)


@dataclass(kw_only=True)
class TrainConfig:
    """Every field is a ``gridgnn train`` flag (``--weight-decay`` → ``weight_decay``)."""

    data: str | None = None
    model: str = "gcn"
    layers: int = 2
    hidden: int = 16
    algo: str = "serial"
    nproc: int = 1
    replication: int = 1
    grid: str | None = None
    blocked_aggregation: int = 0
    partition: str = "random"
    epochs: int = 200
    lr: float = 0.01
    weight_decay: float = 5e-4
    dropout: float = 0.5
    seed: int = 0
    out: str | None = None
    save_logits: bool = False
    dtype: str = "float32"
    device: str = "auto"
    quiet: bool = False
    log_every: int = 1
    timeout_s: float = 600.0

    def validate(self) -> None:
        """Checks that need no data and no processes (run in the launching process)."""
        from ..parallel import ALGOS, GRID_OF

        if self.model not in MODELS:
            raise GridGnnError(f"--model {self.model!r} is not available; available: {', '.join(MODELS)}")
        if self.algo not in ALGOS:
            raise GridGnnError(f"--algo {self.algo!r} is not available; choose one of {', '.join(ALGOS)}")
        if self.layers < 1:
            raise GridGnnError(f"--layers must be >= 1, got {self.layers}")
        if self.hidden < 1:
            raise GridGnnError(f"--hidden must be >= 1, got {self.hidden}")
        if self.epochs < 1:
            raise GridGnnError(f"--epochs must be >= 1, got {self.epochs}")
        if not 0.0 <= self.dropout < 1.0:
            raise GridGnnError(f"--dropout must be in [0, 1), got {self.dropout}")
        if self.lr <= 0:
            raise GridGnnError(f"--lr must be positive, got {self.lr}")
        if self.weight_decay < 0:
            raise GridGnnError(f"--weight-decay must be >= 0, got {self.weight_decay}")
        if self.dtype not in ("float32", "float64"):
            raise GridGnnError(f"--dtype must be float32 or float64, got {self.dtype!r}")
        if self.nproc < 1:
            raise GridGnnError(f"--nproc must be >= 1, got {self.nproc}")
        if self.seed < 0:
            raise GridGnnError(f"--seed must be >= 0, got {self.seed}")
        if self.timeout_s <= 0:
            raise GridGnnError(f"--timeout must be positive, got {self.timeout_s}")
        if self.log_every < 0:
            raise GridGnnError(f"--log-every must be >= 0, got {self.log_every}")
        if self.out is not None:
            import os

            if os.path.exists(self.out) and not os.path.isdir(self.out):
                raise GridGnnError(f"--out {self.out} exists and is not a directory")
            try:
                os.makedirs(self.out, exist_ok=True)
            except OSError as exc:
                raise GridGnnError(f"cannot create --out {self.out}: {exc.strerror or exc}") from None
        kind = GRID_OF.get(self.algo)
        if self.replication != 1 and kind != "1.5d":
            raise GridGnnError(f"--replication applies to 1.5D algorithms; {self.algo} needs --replication 1")
        if self.grid is not None and kind not in ("2d", "3d"):
            raise GridGnnError(f"--grid applies to 2d, 3d and plexus; {self.algo} takes --nproc/--replication")
        sharded = bool(self.data and self.data.startswith("sharded:"))
        if sharded and self.partition != "random":
            raise GridGnnError("a sharded dataset fixes the vertex order it was written with; drop --partition "
                               "(choose it with gridgnn shard --method)")
        if self.algo == "serial":
            if self.nproc != 1:
                raise GridGnnError(f"--algo serial runs one process; got --nproc {self.nproc}")
        else:
            self.mesh_shape(self.nproc)
        if self.blocked_aggregation < 0:
            raise GridGnnError(f"--blocked-aggregation must be >= 0, got {self.blocked_aggregation}")
        if self.blocked_aggregation and self.algo != "plexus":
            raise GridGnnError("--blocked-aggregation applies to --algo plexus")

    def mesh_shape(self, world: int) -> tuple[int, ...]:
        """The process grid for ``world`` processes (``--grid``, or a near-square / near-cubic default)."""
        from ..dist.grid import default_shape, grid_shape
        from ..parallel import GRID_OF

        kind = GRID_OF[self.algo]
        if kind in ("1d", "1.5d"):
            return grid_shape(kind, world, replication=self.replication)
        if self.grid is None:
            return default_shape(kind, world)
        try:
            shape = tuple(int(v) for v in self.grid.replace("x", ",").split(","))
        except ValueError:
            raise GridGnnError(f"--grid {self.grid!r} must be integers separated by commas, e.g. 2,2,2") from None
        return grid_shape(kind, world, shape=shape)

    def to_dict(self) -> dict:
        return asdict(self)
