r"""Process launch: ``--nproc P`` spawns P local processes (gloo on CPU, NCCL on CUDA; rendezvous on
127.0.0.1 at a free port); under ``torchrun`` (``RANK``/``WORLD_SIZE``/``LOCAL_RANK``) or ``srun``
(``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``) the same command uses the environment instead.

A worker is ``fn(ctx, *args)``. It validates its input *before* calling ``ctx.init()`` (the first
collective: the rendezvous), so bad input ends every rank instead of a hang. A
:class:`~gridgnn.errors.GridGnnError` ends the rank with status 2; the parent of spawned workers stops the
rest, prints each distinct message once as ``gridgnn: error: ...`` and exits with status 2 (under
torchrun/srun every failing rank prints its own message).
"""
from __future__ import annotations

import datetime
import os
import pickle
import socket
import sys
import tempfile
import traceback
from dataclasses import dataclass

import torch

from ..errors import GridGnnError


@dataclass
class LaunchContext:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: str = "cpu"
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    timeout_s: float = 600.0
    initialized: bool = False

    @property
    def backend(self) -> str:
        return "nccl" if self.device.startswith("cuda") else "gloo"

    def init(self) -> None:
        """Join the process group (idempotent). The only place gridgnn calls ``init_process_group``."""
        if self.initialized:
            return
        import torch.distributed as dist

        if self.device.startswith("cuda"):
            torch.cuda.set_device(self.local_rank)
            self.device = f"cuda:{self.local_rank}"
        dist.init_process_group(self.backend, init_method=f"tcp://{self.master_addr}:{self.master_port}",
                                rank=self.rank, world_size=self.world_size,
                                timeout=datetime.timedelta(seconds=self.timeout_s))
        self.initialized = True

    def shutdown(self, *, clean: bool = True) -> None:
        """Leave the process group. ``clean``: wait for every rank first (a rank that tears down its gloo
        connections while a peer is still finishing can abort that peer); after an error, skip the wait."""
        if self.initialized:
            import torch.distributed as dist

            if clean:
                dist.barrier()
            dist.destroy_process_group()
            self.initialized = False


def resolve_device(device: str = "auto") -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise GridGnnError("--device cuda requested but CUDA is not available")
    if device not in ("cpu", "cuda"):
        raise GridGnnError(f"unknown device {device!r}; use auto, cpu or cuda")
    return device


def env_context(device: str = "auto") -> LaunchContext | None:
    """A context from torchrun or SLURM variables, or ``None`` when neither is set."""
    e = os.environ
    dev = resolve_device(device)
    if "RANK" in e and "WORLD_SIZE" in e:
        return LaunchContext(int(e["RANK"]), int(e["WORLD_SIZE"]), int(e.get("LOCAL_RANK", 0)),
                             int(e.get("LOCAL_WORLD_SIZE", e["WORLD_SIZE"])), dev,
                             e.get("MASTER_ADDR", "127.0.0.1"), int(e.get("MASTER_PORT", 29500)))
    if "SLURM_PROCID" in e and "SLURM_NTASKS" in e and int(e["SLURM_NTASKS"]) > 1 and "SLURM_STEP_ID" in e \
            and e.get("SLURM_STEP_ID") not in ("batch", "extern", "4294967294", "4294967291"):
        # inside an srun step (a batch script without srun is not a rank of the job)
        if int(e.get("SLURM_NNODES", "1")) > 1 and "MASTER_ADDR" not in e:
            raise GridGnnError("multi-node srun needs MASTER_ADDR (and MASTER_PORT) set to the first node")
        return LaunchContext(int(e["SLURM_PROCID"]), int(e["SLURM_NTASKS"]), int(e.get("SLURM_LOCALID", 0)),
                             int(e.get("SLURM_NTASKS_PER_NODE", e["SLURM_NTASKS"]).split("(")[0]), dev,
                             e.get("MASTER_ADDR", "127.0.0.1"), int(e.get("MASTER_PORT", 29500)))
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _set_threads(local_world: int) -> None:
    cores = os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // max(1, local_world)))


_PORT_TAKEN = 75


def _child(local_rank: int, fn, args, ctx_proto: LaunchContext, result_dir: str | None, err_dir: str) -> None:
    ctx = LaunchContext(local_rank, ctx_proto.world_size, local_rank, ctx_proto.world_size, ctx_proto.device,
                        ctx_proto.master_addr, ctx_proto.master_port, ctx_proto.timeout_s)
    _set_threads(ctx.local_world_size)
    code = 0
    try:
        out = fn(ctx, *args)
        if result_dir is not None:
            with open(os.path.join(result_dir, f"rank{local_rank}.pkl"), "wb") as fh:
                pickle.dump(out, fh)
        ctx.shutdown()
    except GridGnnError as exc:
        with open(os.path.join(err_dir, f"rank{local_rank}.txt"), "w") as fh:
            fh.write(str(exc))
        code = 2
    except Exception as exc:  # noqa: BLE001
        if "EADDRINUSE" in str(exc) and not ctx.initialized:
            code = _PORT_TAKEN  # the free port was taken before rank 0 could listen: the parent retries
        else:
            traceback.print_exc()
            code = 1
    except BaseException:  # noqa: BLE001 - report and end this rank; the parent ends the rest
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown either way: on error the parent ends the other ranks; on success, static
    # destructors of the communication library's threads have been seen to abort ("terminate called without
    # an active exception") after a clean destroy_process_group, failing a finished job.
    os._exit(code)


def launch(fn, nproc: int, *args, device: str = "auto", timeout_s: float = 600.0, collect: bool = False):
    """Run ``fn(ctx, *args)`` on every rank; returns the list of per-rank results when ``collect``.

    Under torchrun/srun this process is one rank (``nproc`` must match or be omitted) and the list holds
    only this rank's result. Otherwise ``nproc`` processes are spawned here.
    """
    ctx = env_context(device)
    if ctx is not None:
        if nproc not in (None, ctx.world_size):
            raise GridGnnError(f"--nproc {nproc} disagrees with the launcher's WORLD_SIZE={ctx.world_size}")
        ctx.timeout_s = timeout_s
        try:
            out = fn(ctx, *args)
        except GridGnnError as exc:
            print(f"gridgnn: error (rank {ctx.rank}): {exc}", file=sys.stderr, flush=True)
            os._exit(2)  # peers blocked in a collective are ended by the launcher
        ctx.shutdown()
        return [out]
    if nproc is None or nproc < 1:
        raise GridGnnError(f"--nproc must be a positive integer, got {nproc}")
    dev = resolve_device(device)
    if dev == "cuda" and nproc > torch.cuda.device_count():
        raise GridGnnError(f"--nproc {nproc} exceeds the {torch.cuda.device_count()} visible CUDA devices")
    import logging

    import torch.multiprocessing as mp

    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)  # we report failures ourselves
    with tempfile.TemporaryDirectory(prefix="gridgnn-") as tmp:
        rdir = tmp if collect else None
        edir = os.path.join(tmp, "errors")
        os.makedirs(edir)
        for attempt in range(5):
            proto = LaunchContext(0, nproc, 0, nproc, dev, "127.0.0.1", free_port(), timeout_s)
            try:
                mp.start_processes(_child, args=(fn, args, proto, rdir, edir), nprocs=nproc, join=True,
                                   start_method="spawn")
                break
            except mp.ProcessExitedException as exc:
                if exc.exit_code == _PORT_TAKEN and attempt < 4:
                    continue
                messages = []
                for name in sorted(os.listdir(edir)):
                    with open(os.path.join(edir, name)) as fh:
                        msg = fh.read()
                    if msg not in messages:
                        messages.append(msg)
                for msg in messages:
                    print(f"gridgnn: error: {msg}", file=sys.stderr, flush=True)
                code = 2 if messages else (exc.exit_code if exc.exit_code and exc.exit_code > 0 else 1)
                raise SystemExit(code) from None
            except mp.ProcessRaisedException as exc:  # pragma: no cover - _child catches everything
                raise SystemExit(1) from exc
        if not collect:
            return None
        out = []
        for r in range(nproc):
            with open(os.path.join(tmp, f"rank{r}.pkl"), "rb") as fh:
                out.append(pickle.load(fh))
        return out
