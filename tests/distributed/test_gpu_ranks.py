"""Where a rank's GPU and its memory come from, checked here without a GPU: the device each rank of a node takes,
and the free memory the guard holds every rank to (the least of any rank's, all-reduced over gloo with the free
memory of each rank's "GPU" made up)."""
import dataclasses

import pytest

from gridgnn.distributed.comm import Comm
from gridgnn.distributed.grid import ProcessGrid
from gridgnn.distributed.launch import launch
from gridgnn.errors import GridGnnError


def test_each_rank_takes_a_gpu_of_its_own_or_every_rank_of_the_node_is_refused():
    """torchrun / srun with the node's GPUs visible to every task: the local rank; ``srun --gpus-per-task=1`` (each
    task sees its own one GPU): that one, whatever the local rank; ranks staged on one GPU: modulo; more ranks than
    GPUs under NCCL: the same error on every rank of the node (none may wait in a rendezvous the others left)."""
    from gridgnn.distributed.launch import rank_gpu

    assert [rank_gpu(r, 4, 4) for r in range(4)] == [0, 1, 2, 3]
    assert [rank_gpu(r, 2, 8) for r in range(2)] == [0, 1]
    assert [rank_gpu(r, 4, 1, bound=True) for r in range(4)] == [0, 0, 0, 0]
    assert [rank_gpu(r, 4, 2, shared=True) for r in range(4)] == [0, 1, 0, 1]
    for r in range(4):
        with pytest.raises(GridGnnError, match="4 ranks on a node whose ranks each see 2 GPUs: NCCL needs one GPU per"):
            rank_gpu(r, 4, 2)
        with pytest.raises(GridGnnError, match="4 ranks on a node whose ranks each see 1 GPU: NCCL"):  # torchrun, one GPU
            rank_gpu(r, 4, 1)
    with pytest.raises(GridGnnError, match="sees no CUDA device"):
        rank_gpu(0, 1, 0)


def test_the_tasks_of_an_srun_step_on_this_node_come_from_its_task_list(monkeypatch):
    """``srun -N2 -n7`` without ``--ntasks-per-node`` sets no ``SLURM_NTASKS_PER_NODE``: the node's tasks come from
    the step's task list (``4,3``, ``4(x2)``), not the job's 7 — which would refuse a node of 4 GPUs."""
    from gridgnn.distributed.launch import env_context, slurm_tasks_on_node

    assert [slurm_tasks_on_node("4(x2),3", k) for k in range(3)] == [4, 4, 3]
    assert slurm_tasks_on_node("2", 0) == 2
    for var in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        monkeypatch.delenv(var, raising=False)
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "7", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0",
           "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_STEP_TASKS_PER_NODE": "4,3", "MASTER_ADDR": "node0"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr("gridgnn.distributed.launch.release_freed_memory", lambda: None)
    ctx = env_context("cpu")
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.local_world_size) == (5, 7, 1, 3)
    monkeypatch.delenv("SLURM_STEP_TASKS_PER_NODE")
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "4(x2)")
    assert env_context("cpu").local_world_size == 4


def test_a_launcher_without_local_ranks_is_refused_on_gpus(monkeypatch):
    """RANK and WORLD_SIZE with no local rank of any launcher: on GPUs every rank would take GPU 0 — refused with
    what to set; on the host the local rank only divides the memory guard, so it runs (the node taken as the whole
    job, the cautious guess). A job script exporting RANK under srun, or mpirun's ranks, give theirs: srun's
    ``--gpus-per-task=1`` task then takes its one GPU. A local rank without the node's count where the ranks
    outnumber the GPUs is refused naming LOCAL_WORLD_SIZE, not as too many ranks on one node."""
    from gridgnn.distributed import launch as L

    for var in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_STEP_TASKS_PER_NODE",
                "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID", "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(L, "release_freed_memory", lambda: None)
    ctx = L.env_context("cpu")
    assert (ctx.rank, ctx.local_rank, ctx.local_world_size) == (1, 0, 2)
    monkeypatch.setattr(L, "resolve_device", lambda device: "cuda")
    monkeypatch.setattr(L.torch.cuda, "device_count", lambda: 1)
    with pytest.raises(GridGnnError, match="RANK and WORLD_SIZE are set but no local rank .LOCAL_RANK, SLURM_LOCALID"):
        L.env_context("cuda")
    slurm = {"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "batch"}
    for k, v in slurm.items():  # a batch script's own step: not a task of an srun step, no place on the node
        monkeypatch.setenv(k, v)
    with pytest.raises(GridGnnError, match="RANK and WORLD_SIZE are set but no local rank"):
        L.env_context("cuda")
    monkeypatch.setenv("SLURM_STEP_ID", "0")  # srun, RANK exported by the job script: one GPU bound to the task
    ctx = L.env_context("cuda")
    assert (ctx.local_rank, ctx.local_world_size) == (1, 2)
    assert L.rank_gpu(ctx.local_rank, ctx.local_world_size, 1, bound=True) == 0
    monkeypatch.setenv("SLURM_STEP_ID", "batch")  # mpirun in a batch script (its step's SLURM_LOCALID is 0): MPI's
    monkeypatch.setenv("SLURM_LOCALID", "0")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")  # its node's count not given, 1 GPU: refused
    with pytest.raises(GridGnnError, match="set LOCAL_WORLD_SIZE to the ranks on each node"):
        L.env_context("cuda")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")  # given: rank_gpu then judges 2 ranks on 1 GPU
    ctx = L.env_context("cuda")
    assert (ctx.local_rank, ctx.local_world_size) == (1, 2)
    monkeypatch.setenv("LOCAL_RANK", "1")  # torchrun's own, first
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert (L.env_context("cuda").local_rank, L.env_context("cuda").local_world_size) == (1, 2)


def _guard_worker(ctx):
    from unittest import mock

    from gridgnn.train import rank_setup

    ctx.init()
    comm = Comm(ProcessGrid.build("1d", "cpu"))
    free = {0: 9 << 30, 1: 3 << 30, 2: 7 << 30}[ctx.rank]  # rank 1's GPU is busy with another job
    with mock.patch.object(rank_setup, "available_memory_bytes", lambda device: free):
        got = rank_setup.gpu_memory_for_ranks(ctx, comm, "cuda:0")
    return got, dataclasses.replace(ctx, stage_on_host=True).gpu_sharers()


def test_every_rank_guards_its_gpu_memory_with_the_least_any_rank_has():
    """Each rank read its own GPU's free memory, so a rank whose GPU is busy refused while its peers went on to
    wait for it: now every rank holds the least (3 GiB here) — the same decision on every rank; one GPU each under
    NCCL, and ranks staged on one GPU (a machine without one here: 3 ranks on it) share it."""
    results = launch(_guard_worker, 3, device="cpu", collect=True)
    assert [r[0] for r in results] == [(3 << 30, 1)] * 3
    assert [r[1] for r in results] == [3] * 3


@pytest.mark.parametrize("env, bad", [({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc'"), ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0'"),
                                      ({"RANK": "3"}, "RANK='3' must be an integer, \\[0, 1\\]"),
                                      ({"RANK": "-1"}, "RANK='-1'"), ({"LOCAL_RANK": "x"}, "LOCAL_RANK='x'"),
                                      ({"MASTER_PORT": "abc"}, "MASTER_PORT='abc'"),
                                      ({"MASTER_PORT": "70000"}, "MASTER_PORT='70000'")])
def test_a_launchers_malformed_variable_is_one_line_naming_it(monkeypatch, env, bad):
    """RANK, WORLD_SIZE, LOCAL_RANK, MASTER_PORT that are not integers in range (a RANK outside the job would
    wait for the rendezvous' whole timeout) are refused naming the variable, before any rendezvous."""
    from gridgnn.distributed import launch as L

    for var in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_LOCAL_RANK", "MASTER_PORT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(L, "release_freed_memory", lambda: None)
    with pytest.raises(GridGnnError, match=f"environment variable {bad}"):
        L.env_context("cpu")


def test_a_torchrun_rank_whose_peer_ended_before_the_final_barrier_says_so_in_one_line(tmp_path):
    """Under torchrun a peer that failed after the last collective (writing its outputs) ends this rank's final
    barrier: one line and exit status 1, as a spawned rank's, not gloo's traceback."""
    import subprocess
    import sys

    script = ("import gridgnn.distributed.launch as L\n"
              "class Ctx:\n"
              "    rank, world_size, timeout_s = 1, 2, 5.0\n"
              "    def shutdown(self):\n"
              "        raise RuntimeError('Connection closed by peer\\nmore')\n"
              "L.env_context = lambda device='auto': Ctx()\n"
              "L.launch(lambda ctx: 7, None)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == ["gridgnn: error: rank 1: a peer ended before the job's final barrier "
                                                "(Connection closed by peer)"]
