r"""Process launch: ``--nproc P`` spawns P local processes (gloo on CPU, NCCL on CUDA); under ``torchrun``
(``RANK``/``WORLD_SIZE``/``LOCAL_RANK``) or ``srun`` (``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_LOCALID``) the same
command uses the environment instead.

**A local launch listens on loopback only.** The rendezvous is a ``FileStore`` in a private temporary folder
(mode 0700; no TCP store socket at all), and the ranks' own connections are bound to the loopback interface
(``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME``), so nothing of a local job is reachable from another host.

**Failures end every rank with one message.** A worker is ``fn(ctx, *args)``; it validates its input *before*
calling ``ctx.init()`` (the rendezvous), so bad input ends every rank instead of a hang. The parent watches
every rank; when one ends badly it gives the others a moment to report, stops the rest (SIGTERM, then SIGKILL),
and prints one ``gridgnn: error: ...`` line per distinct cause, in this order of precedence:

1. input errors (:class:`~gridgnn.errors.GridGnnError` raised by a rank) — exit status 2;
2. a rank killed by a signal the launcher did not send (``rank 2 was killed by signal 9 (SIGKILL)``) or that
   exited without a message, or whose code called ``sys.exit()`` (``rank 0: its code called sys.exit(0) ...``: a
   rank's work ends with the job's, never alone) — exit status 1;
3. communication failures that ranks saw because of the above or of a stalled peer (a collective that timed out
   after ``--timeout`` names the collective, axis and phase) — exit status 1.

**Signals.** SIGINT, SIGTERM and SIGHUP (unless ignored, as under ``nohup``) to the launcher stop every rank, wait
until they are gone (so that what they left in ``--out`` can be removed after them), remove the temporary folder and
end with ``gridgnn: interrupted (SIGINT)`` and status 130 (SIGTERM: 143, SIGHUP: 129). The ranks start with SIGINT
and SIGHUP blocked, so a Ctrl-C in the terminal (which signals the whole foreground group) or its closing reaches
only the launcher; each rank also dies
with its parent (``PR_SET_PDEATHSIG`` on Linux; the parent of a rank forked by the fork server is that server,
which ends with the launcher), so a launcher killed outright leaves no orphan.

**Start-up.** Ranks fork from a fork server that the launching process starts once and reuses for every later
launch (:func:`_start_context`; ``GRIDGNN_START_METHOD=spawn`` for fresh interpreters instead).

**Temporary folders.** A launch's private folder and multiprocessing's (where the fork server's socket lies)
are ``TMPDIR/gridgnn-PID-XXXXXXXX``, each with a marker file naming the launcher
(``pid N on HOST``). Both are removed when the launcher ends; those of a launcher killed outright (``kill -9``)
are swept by the next launch: a folder is removed only when its name, its owner (this user), its marker and its
host say that gridgnn made it for a process of this host that no longer runs (:func:`sweep_stale_dirs`).

Results of ``collect=True`` travel through the private temporary folder as pickles written by the ranks this
launcher started (trusted: nobody else can write there); nothing a user supplies is unpickled.
"""
from __future__ import annotations

import datetime
import gc
import json
import os
import pickle
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
import dataclasses
from dataclasses import dataclass
from multiprocessing import resource_tracker

import torch

from ..errors import CommFailure, GridGnnError, out_of_memory
from . import staged
from .machine import release_freed_memory, usable_cores


def rank_gpu(local_rank: int, local_ranks: int, visible: int, *, shared: bool = False,
             bound: bool = False) -> int:
    """The CUDA device of the rank ``local_rank`` of the ``local_ranks`` of its node among the ``visible`` GPUs: its
    local rank where the node's ranks each have one of their own among them (torchrun; srun with the node's GPUs
    visible to every task); the one GPU a task sees where srun binds each task its own (``bound``: an srun task,
    ``srun --gpus-per-task=1``); ``shared`` (ranks staged through the host, a test mode) its local rank modulo the
    GPUs. Otherwise an error, the same on every rank of the node: NCCL admits one rank per GPU."""
    if visible < 1:
        raise GridGnnError(f"rank {local_rank} of its node sees no CUDA device (CUDA_VISIBLE_DEVICES, the driver)")
    if shared:
        return local_rank % visible
    if local_ranks <= visible:
        return local_rank
    if visible == 1 and bound:
        return 0
    raise GridGnnError(f"{local_ranks} ranks on a node whose ranks each see {visible} GPU{'s' if visible > 1 else ''}: "
                       "NCCL needs one GPU per rank (start at most as many ranks per node as GPUs, or bind one GPU "
                       "per task)")


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
    store_file: str | None = None  # local launch: FileStore rendezvous (no listening store socket)
    host_memory: int | None = None  # local launch: the host memory the caller measured before spawning
    startup: dict | None = None  # local launch: the caller's start-up clock, continued on the ranks
    stage_on_host: bool = False  # local launch, tests: ranks share the GPUs, collectives staged over gloo
    settled: bool = False  # every rank is past its last collective (settle): shutdown waits for no peer

    @property
    def backend(self) -> str:
        return "nccl" if self.device.startswith("cuda") and not self.stage_on_host else "gloo"

    @property
    def ranks_per_node(self) -> int | None:
        """Ranks per node where the job spans several nodes, else ``None`` (torchrun numbers the ranks node by node,
        and so does srun with its default block distribution: rank ``r`` is on node ``r // ranks_per_node``)."""
        return self.local_world_size if self.world_size > self.local_world_size else None

    def gpu_sharers(self) -> int:
        """The most ranks of this node on one GPU: 1 (NCCL: one each), or with the ranks staged through the host
        (:func:`rank_gpu`'s ``shared``) as many as the GPU the most ranks share (the same answer on every rank)."""
        if not self.stage_on_host:
            return 1
        return -(-self.local_world_size // max(1, torch.cuda.device_count()))

    def init(self) -> None:
        """Join the process group (idempotent). The only place gridgnn calls ``init_process_group``."""
        if self.initialized:
            return
        import torch.distributed as dist

        release_freed_memory()  # (idempotent: a rank of another launcher, from here on)

        if self.device.startswith("cuda"):
            e = os.environ  # (bound: an srun task's own GPUs, where no other launcher placed the rank)
            gpu = rank_gpu(self.local_rank, self.local_world_size, torch.cuda.device_count(),
                           shared=self.stage_on_host, bound=in_srun_step(e) and "LOCAL_RANK" not in e
                           and "OMPI_COMM_WORLD_LOCAL_RANK" not in e)
            torch.cuda.set_device(gpu)
            self.device = f"cuda:{gpu}"
        method = (f"file://{self.store_file}" if self.store_file is not None
                  else f"tcp://{self.master_addr}:{self.master_port}")
        # NCCL: the rank's GPU named up front (else torch guesses it from the global rank, and says so)
        bound = {"device_id": torch.device(self.device)} if self.backend == "nccl" else {}
        try:
            dist.init_process_group(self.backend, init_method=method, rank=self.rank, world_size=self.world_size,
                                    timeout=datetime.timedelta(seconds=self.timeout_s), **bound)
            if self.backend == "gloo":  # every rank's connections are up before any rank may end: a rank that
                dist.barrier()  # ends during a peer's connectFullMesh makes gloo print a line of its own there
        except (RuntimeError, ValueError) as exc:
            origin = "" if self.store_file is not None else (
                f" (this process is rank {self.rank} of {self.world_size} at {self.master_addr}:{self.master_port} "
                "as RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT or SLURM's variables in its environment say: a "
                "torchrun/srun job sets them; left over in a shell, unset them)")
            raise CommFailure(f"rank {self.rank}: the rendezvous of {self.world_size} ranks failed: "
                              f"{_first_line(exc).rstrip('.') if origin else _first_line(exc)}{origin}") from None
        staged.activate(self.stage_on_host)
        self.initialized = True

    def settle(self) -> None:
        """Collective, after a rank's last collective: wait (under ``--timeout``) until every rank is past its own,
        so that what follows needs no peer (rank 0 writing the run's outputs, for as long as that takes, while the
        others leave) and :meth:`shutdown` waits no more."""
        if self.initialized:
            import torch.distributed as dist

            dist.barrier()
            self.settled = True

    def shutdown(self, *, clean: bool = True) -> None:
        """Leave the process group. ``clean``: wait for every rank first (a rank that tears down its gloo
        connections while a peer is still finishing can abort that peer), unless every rank has done so already
        (:meth:`settle`); after an error, skip the wait."""
        if self.initialized:
            import torch.distributed as dist

            if clean and not self.settled:
                dist.barrier()
            dist.destroy_process_group()
            staged.activate(False)
            self.initialized = False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def resolve_device(device: str = "auto") -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise GridGnnError("--device cuda requested but CUDA is not available")
    if device not in ("cpu", "cuda"):
        raise GridGnnError(f"unknown device {device!r}; use auto, cpu or cuda")
    return device


def env_int(e, name: str, default: int | None = None, *, low: int = 0, high: int | None = None) -> int:
    """The launcher's variable ``name`` as an integer in ``[low, high]`` (``default`` when unset), or one line."""
    raw = e.get(name)
    if raw is None and default is not None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f"{low} or more"
        raise GridGnnError(f"the launcher's environment variable {name}={raw!r} must be an integer, {bound}")
    return value


def env_context(device: str = "auto") -> LaunchContext | None:
    """A context from torchrun or SLURM variables, or ``None`` when neither is set."""
    e = os.environ
    dev = resolve_device(device)
    if "RANK" in e and "WORLD_SIZE" in e:
        world = env_int(e, "WORLD_SIZE", low=1)
        rank = env_int(e, "RANK", high=world - 1)
        place = local_place(e, world)
        if dev == "cuda" and world > 1:
            if place is None:
                raise GridGnnError("RANK and WORLD_SIZE are set but no local rank (LOCAL_RANK, SLURM_LOCALID or "
                                   "OMPI_COMM_WORLD_LOCAL_RANK): on GPUs a rank picks its GPU by its rank on its node "
                                   "(torchrun sets LOCAL_RANK and LOCAL_WORLD_SIZE; a launcher of one's own must set "
                                   "them too)")
            if place[1] is None and world > torch.cuda.device_count():
                raise GridGnnError(f"a local rank is set but not the ranks on its node (LOCAL_WORLD_SIZE or "
                                   f"OMPI_COMM_WORLD_LOCAL_SIZE), and the {world} ranks outnumber this node's "
                                   f"{torch.cuda.device_count()} GPUs: set LOCAL_WORLD_SIZE to the ranks on each node")
        release_freed_memory()  # a torchrun rank: before it reads anything
        local_rank, local_size = place or (0, None)
        return LaunchContext(rank, world, local_rank, world if local_size is None else local_size, dev,
                             e.get("MASTER_ADDR", "127.0.0.1"), env_int(e, "MASTER_PORT", 29500, low=1, high=65535))
    if in_srun_step(e):
        if int(e.get("SLURM_NNODES", "1")) > 1 and "MASTER_ADDR" not in e:
            raise GridGnnError("multi-node srun needs MASTER_ADDR (and MASTER_PORT) set to the first node")
        release_freed_memory()  # an srun rank: before it reads anything
        tasks = env_int(e, "SLURM_NTASKS", low=1)
        return LaunchContext(env_int(e, "SLURM_PROCID", high=tasks - 1), tasks, env_int(e, "SLURM_LOCALID", 0),
                             slurm_local_tasks(e), dev,
                             e.get("MASTER_ADDR", "127.0.0.1"), env_int(e, "MASTER_PORT", 29500, low=1, high=65535))
    return None


def local_place(e, world: int) -> tuple[int, int | None] | None:
    """This rank's place on its node where a launcher gives ``RANK`` and ``WORLD_SIZE``: its local rank and the
    node's ranks (``None``: not given, the whole job assumed) from torchrun's variables, else Open MPI's, else
    srun's (a job script exporting ``RANK`` from ``SLURM_PROCID``); ``None`` where none of them is set."""
    if "LOCAL_RANK" in e:
        return env_int(e, "LOCAL_RANK"), env_int(e, "LOCAL_WORLD_SIZE", low=1) if "LOCAL_WORLD_SIZE" in e else None
    if "OMPI_COMM_WORLD_LOCAL_RANK" in e:  # (before SLURM's: mpirun within a batch script sees the batch step's)
        size = "OMPI_COMM_WORLD_LOCAL_SIZE" in e
        return env_int(e, "OMPI_COMM_WORLD_LOCAL_RANK"), env_int(e, "OMPI_COMM_WORLD_LOCAL_SIZE", low=1) if size \
            else None
    if in_srun_step(e) and int(e["SLURM_NTASKS"]) == world and e["SLURM_PROCID"] == e.get("RANK"):
        return int(e.get("SLURM_LOCALID", 0)), slurm_local_tasks(e)
    return None


def in_srun_step(e) -> bool:
    """Whether this process is a task of an srun step of several tasks (a batch script without srun is not a rank
    of the job: its batch step also sets ``SLURM_PROCID`` and ``SLURM_LOCALID``)."""
    return "SLURM_PROCID" in e and "SLURM_NTASKS" in e and env_int(e, "SLURM_NTASKS", low=1) > 1 and "SLURM_STEP_ID" in e \
        and e.get("SLURM_STEP_ID") not in ("batch", "extern", "4294967294", "4294967291")


def slurm_tasks_on_node(spec: str, node: int) -> int:
    """The tasks on node ``node`` (0-based) of a SLURM task list such as ``"4(x2),3"`` (4, 4 and 3 tasks)."""
    counts: list[int] = []
    for part in spec.split(","):
        n, _, repeat = part.partition("(x")
        counts += [int(n)] * (int(repeat.rstrip(")")) if repeat else 1)
    return counts[min(node, len(counts) - 1)]


def slurm_local_tasks(e) -> int:
    """The tasks of this srun step on this node: from the step's task list and this node's index (SLURM sets
    ``SLURM_NTASKS_PER_NODE`` only where ``--ntasks-per-node`` was given), else the job's, else every task."""
    spec = e.get("SLURM_STEP_TASKS_PER_NODE") or e.get("SLURM_TASKS_PER_NODE") or e.get("SLURM_NTASKS_PER_NODE")
    if not spec:
        return int(e["SLURM_NTASKS"])
    return slurm_tasks_on_node(spec, int(e.get("SLURM_NODEID", 0)))


def loopback_interface() -> str:
    """Name of this host's loopback interface (``lo`` on Linux, ``lo0`` on BSD/macOS)."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:  # pragma: no cover - no interface table
        names = []
    for name in names:
        if name == "lo" or name.startswith("lo0"):
            return name
    return next((n for n in names if n.startswith("lo")), "lo")


def _set_threads(local_world: int) -> None:
    cores = usable_cores()
    torch.set_num_threads(max(1, cores // max(1, local_world)))


#: what a fork server imports once, before it forks the ranks: the training code, torch's compiler front end (every
#: torch optimizer imports it on first use, about 2 s per process on a small CPU), then the numba kernels with
#: numba's compiler set up (a rank's first kernel call, about 0.7 s) and the plots' matplotlib (rank 0 of a run with
#: --out), both guarded (:mod:`gridgnn.train.fork_preload`)
FORKSERVER_PRELOAD = ("__main__", "gridgnn.train.worker", "torch._dynamo", "gridgnn.train.fork_preload")


def _start_context():
    """How ranks start: by default, where the platform has it, forked from a *fork server* that this process starts
    once (Python's ``forkserver``: a fresh interpreter that imports :data:`FORKSERVER_PRELOAD` and forks every rank
    of this and later launches, so a rank starts in a tenth of a second instead of re-importing torch); else, or
    with ``GRIDGNN_START_METHOD=spawn``, each rank is a fresh interpreter. A rank gets the launcher's environment
    of the moment either way, and the main module, ``sys.path`` and working folder as ``spawn`` gives them."""
    import multiprocessing as mp

    fits = _short_socket_dir()
    method = os.environ.get("GRIDGNN_START_METHOD", "").strip() or (
        "forkserver" if "forkserver" in mp.get_all_start_methods() and fits else "spawn")
    if method not in ("forkserver", "spawn"):
        raise GridGnnError(f"GRIDGNN_START_METHOD must be forkserver or spawn, got {method!r}")
    if method == "forkserver" and not fits:
        raise GridGnnError(f"GRIDGNN_START_METHOD=forkserver: the fork server's socket would lie deeper than a Unix "
                           f"socket path allows in the temporary folder {tempfile.gettempdir()}; set TMPDIR to a "
                           "shorter path (or leave GRIDGNN_START_METHOD unset)")
    ctx = mp.get_context(method)
    if method == "forkserver":
        _own_mp_tempdir()
        ctx.set_forkserver_preload(list(FORKSERVER_PRELOAD))
    return ctx


def _check_main_guard() -> None:
    r"""Refuse, with one line, a launch from the top level of a script that lacks ``if __name__ == "__main__":``.

    Every rank starts by importing the launching script again (``spawn`` and ``forkserver`` both do): a call at its
    top level would launch again from each rank, and multiprocessing ends that with a long double traceback. The
    check finds the script's module-level statement that led here and looks, in the script's syntax tree, whether
    it lies under such a guard; anything it cannot read (an interactive session, ``python -c``, a frozen program) is
    let through."""
    import ast

    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not path or not os.path.isfile(path):
        return
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None and (name == "__main__" or name.endswith(".__main__")):
        return  # python -m PACKAGE: multiprocessing does not run a package's __main__ again
    frame, line = sys._getframe(1), None
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            line = frame.f_lineno
        frame = frame.f_back
    if line is None:
        return
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError):
        return

    def guarded(node) -> bool:
        t = node.test
        return isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq) and \
            {ast.dump(t.left), ast.dump(t.comparators[0])} == {ast.dump(ast.Name("__name__", ast.Load())),
                                                               ast.dump(ast.Constant("__main__"))}

    for node in tree.body:
        if node.lineno <= line <= (node.end_lineno or node.lineno):
            if isinstance(node, ast.If) and guarded(node) and \
                    any(n.lineno <= line <= (n.end_lineno or n.lineno) for n in node.body):
                return
            raise GridGnnError(f"{os.path.basename(path)} line {line} starts processes from the top level of the "
                               "script; every process imports the script again, so put that code under "
                               "'if __name__ == \"__main__\":'")


#: the longest Unix socket path (``sun_path`` holds 108 bytes with the final NUL on Linux, 104 on BSD/macOS)
_UNIX_PATH_MAX = 103


def _short_socket_dir() -> bool:
    """Whether the fork server's socket (``TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX``, where Python puts it) fits a
    Unix socket path; a deep ``TMPDIR`` does not, and the ranks are then spawned as fresh interpreters instead."""
    import multiprocessing.process

    made = multiprocessing.process.current_process()._config.get("tempdir")  # made once, then reused
    where = made or os.path.join(tempfile.gettempdir(), f"gridgnn-{os.getpid()}-" + "x" * 8)
    return len(os.path.join(where, "listener-" + "x" * 8)) <= _UNIX_PATH_MAX


def _leave_fork_server() -> None:
    """A rank forked by the fork server holds the write end of the pipe whose closing tells the server that its
    clients are gone, which keeps the server alive as long as any rank; let go of it, so that the server ends
    with the launcher and the rank with the server (:func:`_die_with_parent`)."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        os.close(fd)
        server._forkserver_alive_fd = None


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent (the launcher, or the fork server, which ends when
    the launcher does) dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # pragma: no cover
        pass


def _write_report(err_dir: str, rank: int, kind: str, message: str) -> None:
    path = os.path.join(err_dir, f"rank{rank}.json")
    try:
        with open(path + ".tmp", "w") as fh:
            json.dump({"rank": rank, "kind": kind, "message": message}, fh)
        os.replace(path + ".tmp", path)
    except OSError:  # the temporary folder's disk is full: the line itself, not a traceback
        if kind != "comm":
            print(f"gridgnn: error: {message}", file=sys.stderr, flush=True)


#: the marker file of a temporary folder made by a gridgnn launcher
MARKER = "gridgnn-launcher"


def _owner_line(pid: int | None = None) -> str:
    return f"pid {os.getpid() if pid is None else pid} on {socket.gethostname()}"


def private_tempdir() -> str:
    """A new private (0700) folder ``TMPDIR/gridgnn-PID-XXXXXXXX`` holding the marker that lets a later launch
    sweep it when this process was killed before removing it (:func:`sweep_stale_dirs`)."""
    folder = tempfile.mkdtemp(prefix=f"gridgnn-{os.getpid()}-")
    try:
        fd = os.open(os.path.join(folder, MARKER), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(_owner_line())
    except OSError as exc:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        raise GridGnnError(f"cannot write the launcher's temporary folder in {tempfile.gettempdir()}: "
                           f"{exc.strerror or exc}") from None
    return folder


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _gone(pid: int) -> bool:
    """The process ended: no such process, or a zombie all of whose threads have ended too (then its files, and
    the locks on them, are closed; a zombie leader whose other threads are still exiting holds them still)."""
    if not process_alive(pid):
        return True
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X"):
                    return False
    except FileNotFoundError:
        return not process_alive(pid)
    except (OSError, IndexError):
        return False
    return True


_STALE_NAME = None


def sweep_stale_dirs(where: str | None = None) -> list[str]:
    """Remove from ``TMPDIR`` the folders of :func:`private_tempdir` whose launcher no longer runs (killed outright:
    no clean-up of its own): a folder ``gridgnn-PID-...`` of this user, not a link, whose marker file names that
    same PID on this host, a process that is gone. Nothing else is touched; returns what was removed."""
    import re
    import shutil
    import stat

    global _STALE_NAME
    _STALE_NAME = _STALE_NAME or re.compile(r"gridgnn-(\d+)-[A-Za-z0-9_]{8}")
    where = where or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(where)
    except OSError:
        return removed
    me = socket.gethostname()
    for name in names:
        m = _STALE_NAME.fullmatch(name)
        if m is None or int(m.group(1)) == os.getpid():
            continue
        path = os.path.join(where, name)
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            fd = os.open(os.path.join(path, MARKER), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                text = os.read(fd, 300).decode("utf-8", "replace")
            finally:
                os.close(fd)
        except OSError:
            continue
        if text != f"pid {m.group(1)} on {me}" or process_alive(int(m.group(1))):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _own_mp_tempdir() -> None:
    """multiprocessing's temporary folder (where the fork server's socket lies) as a marked ``gridgnn-PID-...``
    folder instead of ``pymp-...``, so that one left by a killed launcher is swept too; removed at exit as
    multiprocessing removes its own."""
    import multiprocessing.process
    import multiprocessing.util as mpu
    import shutil

    config = multiprocessing.process.current_process()._config
    if config.get("tempdir") is not None:
        return
    folder = private_tempdir()
    remove = getattr(mpu, "_remove_temp_dir", None)
    if remove is not None:
        mpu.Finalize(None, remove, args=(shutil.rmtree, folder), exitpriority=-100)
    else:  # pragma: no cover - another Python's multiprocessing
        mpu.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=-100)
    config["tempdir"] = folder


def _child(local_rank: int, fn, args, ctx_proto: LaunchContext, result_dir: str | None, err_dir: str,
           environ: dict | None = None) -> None:
    # SIGINT and SIGHUP stay blocked (inherited from the launcher, or from the fork server it started with the mask
    # in place): Ctrl-C and a closed terminal are the launcher's to handle. SIGTERM (the launcher stopping this rank) ends the process
    # quietly with the default action.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGHUP})
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _leave_fork_server()
    if environ is not None:  # a fork server's child has the server's environment: take the launcher's of now
        os.environ.clear()
        os.environ.update(environ)
    _die_with_parent()
    if os.getppid() == 1:  # the launcher died before we could ask to follow it
        os._exit(1)
    ctx = dataclasses.replace(ctx_proto, rank=local_rank, local_rank=local_rank)
    _set_threads(ctx.local_world_size)
    release_freed_memory()  # before the rank reads anything
    code = 0
    try:
        out = fn(ctx, *args)
        if result_dir is not None:
            try:
                with open(os.path.join(result_dir, f"rank{local_rank}.pkl"), "wb") as fh:
                    pickle.dump(out, fh)
            except OSError as exc:
                raise GridGnnError(f"rank {local_rank}: cannot write its result to the launcher's temporary folder "
                                   f"{result_dir}: {exc.strerror or exc}") from None
        try:
            ctx.shutdown()
        except Exception as exc:  # noqa: BLE001 - a peer that failed after its work ends the barrier: its line says why
            raise CommFailure(f"rank {local_rank}: a peer ended before the job's final barrier "
                              f"({_first_line(exc)})") from None
    except SystemExit as exc:  # sys.exit() in the user's code (a callback): this rank ends, not the job's work
        _write_report(err_dir, local_rank, "internal", f"rank {local_rank}: its code called sys.exit({exc.code!r}) "
                                                       "before the job's work ended")
        code = exc.code if isinstance(exc.code, int) and 0 < exc.code < 256 else 1
    except KeyboardInterrupt:  # raised by the user's code (a callback): an interrupt, as Ctrl-C is
        _write_report(err_dir, local_rank, "interrupt", f"rank {local_rank}: KeyboardInterrupt")
        code = 128 + signal.SIGINT
    except CommFailure as exc:
        _write_report(err_dir, local_rank, "comm", str(exc))
        code = 1
    except GridGnnError as exc:
        _write_report(err_dir, local_rank, "input", str(exc))
        code = 2
    except Exception as exc:  # noqa: BLE001 - an allocation that failed (one line), or a bug (its traceback)
        _write_report(err_dir, local_rank, "internal", _unforeseen(local_rank, exc))
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown either way: on error the parent ends the other ranks; on success, static
    # destructors of the communication library's threads have been seen to abort ("terminate called without
    # an active exception") after a clean destroy_process_group, failing a finished job.
    os._exit(code)


def _unforeseen(rank: int, exc: Exception) -> str:
    """The line of a rank whose work raised what gridgnn did not foresee: an allocation that failed (what the memory
    guard missed: one line), or a bug (its traceback printed first)."""
    oom = out_of_memory(exc)
    if oom is None:
        traceback.print_exc()
    return f"rank {rank}: {oom or f'{type(exc).__name__}: {exc}'}"


class LaunchFailed(SystemExit):
    """The ``SystemExit`` of a failed launch (``code``: the exit status), with the lines printed for it
    (``lines``), so that a caller in Python can carry the cause in its own exception."""

    def __init__(self, code: int, lines: list[str]):
        super().__init__(code)
        self.lines = list(lines)


class _Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Interrupted(signum)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


#: what a signal that ended a rank most likely means, after its name
WHY = {signal.SIGABRT: ": an abort in native code — on GPUs, NCCL's watchdog ends a rank whose collective did not "
                       "complete within --timeout, a peer having stalled or died"}


# seconds the other ranks get to report their own view after one rank fails, and after SIGTERM before SIGKILL
REPORT_GRACE_S = 2.0
KILL_GRACE_S = 3.0


def _stop(procs, *, grace_s: float = KILL_GRACE_S) -> set[int]:
    """SIGTERM every live rank, SIGKILL what is left after ``grace_s``; returns the ranks this stopped."""
    stopped = set()
    for r, p in enumerate(procs):
        if p.exitcode is None:
            stopped.add(r)
            try:
                os.kill(p.pid, signal.SIGTERM)
                os.kill(p.pid, signal.SIGCONT)  # a stopped rank must run to act on SIGTERM
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.exitcode is None:
            p.kill()
            p.join()
    _wait_gone(procs)
    return stopped


def _wait_gone(procs, grace_s: float = KILL_GRACE_S) -> None:
    """Until every rank's process has really ended: a rank forked by the fork server is reported ended (status
    255) as soon as the server dies — a SIGTERM to the whole process group — while it may still be running and
    holding ``--out``'s lock; what is left after ``grace_s`` is killed."""
    pids = [p.pid for p in procs if p.pid is not None]
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if not _gone(pid)]
        if pids:
            time.sleep(0.02)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if not _gone(pid)]
        if pids:
            time.sleep(0.02)


def _read_reports(err_dir: str) -> list[dict]:
    reports = []
    for name in sorted(os.listdir(err_dir)):
        if name.endswith(".json"):
            try:
                with open(os.path.join(err_dir, name)) as fh:
                    reports.append(json.load(fh))
            except (OSError, ValueError):
                pass
    return sorted(reports, key=lambda r: r.get("rank", 0))


def _failure_messages(procs, stopped: set[int], err_dir: str) -> tuple[list[str], int]:
    """The lines to print and the exit status, by the precedence of the module docstring."""
    reports = _read_reports(err_dir)
    by_kind: dict[str, list[str]] = {"input": [], "internal": [], "comm": []}
    reported = set()
    for rep in reports:
        reported.add(rep.get("rank"))
        msgs = by_kind.setdefault(rep.get("kind", "internal"), [])
        if rep.get("message") not in msgs:
            msgs.append(rep.get("message", ""))
    if by_kind["input"]:
        return by_kind["input"], 2
    if by_kind.get("interrupt"):  # a KeyboardInterrupt raised in a rank (the launcher's own signals: _Interrupted)
        return _merge_ranks(by_kind["interrupt"]), 128 + signal.SIGINT
    dead = []
    for r, p in enumerate(procs):
        code = p.exitcode
        if r in stopped or r in reported or code in (0, None):
            continue
        if code < 0:
            dead.append(f"rank {r} was killed by signal {-code} ({_signal_name(-code)}{WHY.get(-code, '')})")
        else:
            dead.append(f"rank {r} exited with status {code} without a message")
    lines = _merge_ranks(by_kind["internal"]) + dead
    if lines:
        return lines, 1
    comm = _merge_ranks(by_kind["comm"])
    silent = sorted(r for r in stopped if r not in reported)
    if comm and silent:
        who = ", ".join(map(str, silent))
        comm.append(f"rank{'s' if len(silent) > 1 else ''} {who} did not fail but did not answer either "
                    "(stalled: stopped by the launcher)")
    return comm or ["a rank failed without a message"], 1


def _merge_ranks(messages: list[str]) -> list[str]:
    """``rank 0: X``, ``rank 2: X`` → ``ranks 0, 2: X`` (one line per distinct cause)."""
    groups: dict[str, list[str]] = {}
    for m in messages:
        head, sep, rest = m.partition(": ")
        if sep and head.startswith("rank ") and head[5:].isdigit():
            groups.setdefault(rest, []).append(head[5:])
        else:
            groups.setdefault(m, [])
    return [f"rank{'s' if len(r) > 1 else ''} {', '.join(r)}: {m}" if r else m for m, r in groups.items()]


def _wait(procs, err_dir: str) -> None:
    """Block until every rank ends; on the first failure stop the rest and raise ``SystemExit``."""
    from multiprocessing.connection import wait

    live = {p.sentinel: p for p in procs}
    while live:
        for s in wait(list(live), timeout=1.0):
            p = live.pop(s)
            p.join()
            if p.exitcode != 0:
                # let the others notice and report (a peer that died closes its connections at once)
                deadline = time.monotonic() + REPORT_GRACE_S
                for q in procs:
                    q.join(max(0.0, deadline - time.monotonic()))
                stopped = _stop(procs)
                lines, code = _failure_messages(procs, stopped, err_dir)
                head = "interrupted" if code == 128 + signal.SIGINT else "error"
                for line in lines:
                    print(f"gridgnn: {head}: {line}", file=sys.stderr, flush=True)
                raise LaunchFailed(code, lines)


def launch(fn, nproc: int, *args, device: str = "auto", timeout_s: float = 600.0, collect: bool = False,
           host_memory: int | None = None, startup: dict | None = None, stage_on_host: bool = False):
    """Run ``fn(ctx, *args)`` on every rank; returns the list of per-rank results when ``collect``.
    ``host_memory``: bytes of host memory the caller measured before the launch, handed to the spawned ranks
    as ``ctx.host_memory`` (their memory check then uses one number for all of them); ``startup``: plain data the
    spawned ranks receive as ``ctx.startup`` (the caller's start-up clock). ``stage_on_host`` (a test mode, spawned
    ranks only): the ranks share the visible GPUs and their collectives cross gloo on host copies
    (:mod:`gridgnn.distributed.staged`), so that P ranks run their device code on one GPU.

    Under torchrun/srun this process is one rank (``nproc`` must match or be omitted) and the list holds
    only this rank's result. Otherwise ``nproc`` processes are spawned here (see the module docstring for
    failures and signals).
    """
    ctx = env_context(device)
    if ctx is not None:
        if stage_on_host:
            raise GridGnnError("host-staged collectives are a local test mode: not under torchrun/srun")
        if nproc not in (None, ctx.world_size):
            raise GridGnnError(f"--nproc {nproc} disagrees with the launcher's WORLD_SIZE={ctx.world_size}")
        ctx.timeout_s = timeout_s
        try:
            out = fn(ctx, *args)
        except GridGnnError as exc:
            msg = str(exc) if isinstance(exc, CommFailure) else f"(rank {ctx.rank}) {exc}"
            sys.stdout.flush()
            print(f"gridgnn: error: {msg}", file=sys.stderr, flush=True)
            os._exit(1 if isinstance(exc, CommFailure) else 2)  # peers blocked in a collective: ended by torchrun
        except Exception as exc:  # noqa: BLE001 - as a spawned rank's: one line naming the rank, and this rank ends
            line = _unforeseen(ctx.rank, exc)
            sys.stdout.flush()
            print(f"gridgnn: error: {line}", file=sys.stderr, flush=True)
            os._exit(1)
        # the run's communicators and process groups, if a reference cycle still holds them, are freed now, while
        # the interpreter is whole: left to its teardown, gloo's threads have been seen to abort the process
        # ("terminate called without an active exception") after the job had finished
        gc.collect()
        try:
            ctx.shutdown()
        except Exception as exc:  # noqa: BLE001 - a peer that failed after its work ends the barrier: its line says why
            sys.stdout.flush()  # (os._exit flushes nothing: the rank's last lines first)
            print(f"gridgnn: error: rank {ctx.rank}: a peer ended before the job's final barrier ({_first_line(exc)})",
                  file=sys.stderr, flush=True)
            os._exit(1)
        gc.collect()
        return [out]
    if nproc is None or nproc < 1:
        raise GridGnnError(f"--nproc must be a positive integer, got {nproc}")
    dev = resolve_device(device)
    if dev == "cuda" and nproc > torch.cuda.device_count() and not stage_on_host:
        raise GridGnnError(f"--nproc {nproc} exceeds the {torch.cuda.device_count()} visible CUDA devices")
    _check_main_guard()
    mpctx = _start_context()
    # a launch from another thread than the main one installs no handler (they are the main thread's alone): a
    # Ctrl-C is then the main thread's to act on, and the ranks (which block it) run on until this process ends
    # (SIGHUP, the terminal closed, unless ignored: under nohup the ranks ignore it too)
    handled = (signal.SIGINT, signal.SIGTERM) + (() if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN else
                                                 (signal.SIGHUP,))
    handled = handled if threading.current_thread() is threading.main_thread() else ()
    old_handlers = {s: signal.getsignal(s) for s in handled}
    lo = loopback_interface()
    env_keys = {"GLOO_SOCKET_IFNAME": lo, "NCCL_SOCKET_IFNAME": lo}
    old_env = {k: os.environ.get(k) for k in env_keys}
    sweep_stale_dirs()  # what launchers killed outright left
    tmp = private_tempdir()  # mode 0700: the rendezvous and reports are ours alone
    procs = []
    try:
        for s in handled:
            signal.signal(s, _raise_interrupt)
        rdir = tmp if collect else None
        edir = os.path.join(tmp, "errors")
        os.makedirs(edir)
        proto = LaunchContext(0, nproc, 0, nproc, dev, timeout_s=timeout_s,
                              store_file=os.path.join(tmp, "rendezvous"), host_memory=host_memory,
                              startup=startup, stage_on_host=stage_on_host)
        # Children inherit the blocked mask (SIGINT stays blocked in them) and the loopback-only interfaces. Python's
        # resource tracker is started first: starting it (in the first start()) unblocks SIGINT and SIGTERM on its
        # way out, and the fork server started next would then preload torch with a Ctrl-C live.
        resource_tracker.ensure_running()
        os.environ.update(env_keys)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        try:
            for r in range(nproc):
                p = mpctx.Process(target=_child, args=(r, fn, args, proto, rdir, edir, dict(os.environ)),
                                  daemon=False)
                p.start()
                procs.append(p)
        finally:
            for k, v in old_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})  # a pending Ctrl-C is raised here
        _wait(procs, edir)
        if not collect:
            return None
        out = []
        for r in range(nproc):
            with open(os.path.join(tmp, f"rank{r}.pkl"), "rb") as fh:
                out.append(pickle.load(fh))
        return out
    except _Interrupted as exc:
        for s in handled:
            signal.signal(s, signal.SIG_IGN)  # a second Ctrl-C does not interrupt the clean-up
        _stop(procs, grace_s=1.0)
        print(f"gridgnn: interrupted ({_signal_name(exc.signum)}); stopped {len(procs)} rank(s)",
              file=sys.stderr, flush=True)
        raise SystemExit(128 + exc.signum) from None
    finally:
        if any(p.exitcode is None for p in procs):
            _stop(procs, grace_s=1.0)
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        for s, h in old_handlers.items():
            signal.signal(s, h)
