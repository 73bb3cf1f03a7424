"""Two torchrun agents on this machine as two nodes (c10d rendezvous on loopback, one rank per node): training from a
dataset sharded first (the big-graph path under torchrun/srun: each rank reads its blocks) equals serial training
of the graph, and losing a node (its agent and its rank killed outright) ends the other within a bounded time with one
gridgnn error line, no traceback."""
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time

import pytest

from ..train._runs import TORCHRUN, free_loopback_port

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("pgrep") is None,
                                reason="uses pgrep and Linux signals")

SBM = "synthetic:sbm?n=300&classes=3&avg_degree=6&features=8"
#: seconds the surviving node has to end once the other is gone (the lost peer is seen at its next collective)
LOSS_EXIT_S = 30


def _agents(tmp_path, *train_args, data: str = SBM) -> list[subprocess.Popen]:
    """Two torchrun agents, each one node of one rank, meeting at a c10d rendezvous that agent 0 hosts."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONUNBUFFERED"] = "1"
    port = free_loopback_port()
    out = []
    for node in range(2):
        cmd = [TORCHRUN, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"gridgnn-{port}",
               "--rdzv-conf", f"is_host={int(node == 0)}", "--max-restarts", "0",
               "-m", "gridgnn", "train", "--data", data, *map(str, train_args)]
        out.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                    cwd=tmp_path, start_new_session=True))
    return out


def _kill_node(agent: subprocess.Popen) -> None:
    """SIGKILL an agent and its ranks (torchrun starts each rank in a session of its own); an agent already reaped
    is left alone (its PID may be another process's by now)."""
    if agent.poll() is not None:
        return
    ranks = subprocess.run(["pgrep", "-P", str(agent.pid)], capture_output=True, text=True).stdout.split()
    for pid in [agent.pid, *map(int, ranks)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_two_nodes_train_from_shards_like_serial(tmp_path):
    from gridgnn.commands.shard import shard

    shard(SBM, str(tmp_path / "shards"), blocks="2x2", method="single-perm", seed=4)  # gridgnn shard, first
    common = ["--algo", "1d", "--epochs", 3, "--dtype", "float64", "--seed", 4, "--quiet"]
    agents = _agents(tmp_path, *common, "--out", tmp_path / "two-nodes", data=f"sharded:{tmp_path / 'shards'}")
    try:
        for a in agents:
            _, err = a.communicate(timeout=240)
            assert a.returncode == 0, err[-2000:]
    finally:
        for a in agents:
            _kill_node(a)
    from gridgnn.train.config import TrainConfig
    from gridgnn.train.worker import train_worker

    ref = train_worker(None, TrainConfig(data=SBM, algo="serial", epochs=3, dtype="float64", seed=4, quiet=True))
    s = json.loads((tmp_path / "two-nodes" / "summary.json").read_text())
    assert s["nproc"] == 2 and s["algo"] == "1d" and s["data"].startswith("sharded:")
    assert abs(s["final_loss"] - ref["final_loss"]) <= 1e-9 * abs(ref["final_loss"])
    assert s["test_acc"] == ref["test_acc"] and s["best_epoch"] == ref["best_epoch"]


def test_a_lost_node_ends_the_other(tmp_path):
    agents = _agents(tmp_path, "--algo", "1d", "--epochs", 1000000, "--log-every", 1, "--hidden", 8,
                     "--timeout", 60)
    try:
        sel = selectors.DefaultSelector()
        for a in agents:
            sel.register(a.stdout, selectors.EVENT_READ, a)
        lead, t0 = None, time.monotonic()
        while lead is None and time.monotonic() - t0 < 180:  # rank 0's node prints the epoch lines
            if any(a.poll() is not None for a in agents):  # one ended early: stop both, then show why
                for a in agents:
                    _kill_node(a)
                pytest.fail("an agent ended before training: " + " | ".join(a.communicate()[1][-1500:]
                                                                             for a in agents))
            for key, _ in sel.select(timeout=1):
                if key.fileobj.readline().startswith("epoch    2"):
                    lead = key.data
        assert lead is not None, "the two nodes did not start training"
        sel.close()
        lost = agents[1 - agents.index(lead)]
        _kill_node(lost)
        t1 = time.monotonic()
        _, err = lead.communicate(timeout=LOSS_EXIT_S + 30)
        took = time.monotonic() - t1
    finally:
        for a in agents:
            _kill_node(a)
    assert lead.returncode != 0 and took <= LOSS_EXIT_S, (lead.returncode, took)
    lines = [ln for ln in err.splitlines() if ln.startswith("gridgnn: error:")]
    assert len(lines) == 1 and "rank 0" in lines[0] and "went away (rank 1 on node 1)" in lines[0], err[-3000:]
    assert "Traceback" not in err.split("gridgnn: error:")[0][-500:]  # nothing of the rank's own before its line
