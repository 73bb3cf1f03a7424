"""`gridgnn plan`: exactly the valid configurations for P (brute force with the library's own grid checks, over
P ≤ 64), deterministic and ranked; the time model's arithmetic; `--algo auto` trains the plan's pick and records
the prediction next to the measurement."""
import contextlib
import json
import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gridgnn.distributed.grid import grid_shape
from gridgnn.errors import GridGnnError
from gridgnn.graph.spec import load_graph
from gridgnn.parallel.registry import overlap_algorithms
from gridgnn.planner.plan import PLEXUS_ORDERS, ROW_PARTITIONS, SUMMA_ORDERS, Candidate, candidates
from gridgnn.planner.timing import Profile, fit_profile, predict_step
from gridgnn.train.invocation import config_from_flags
from gridgnn.train.planning import plan_configs

from ..train._runs import cli_batch, run_main

SBM = "synthetic:sbm?n=400&classes=3&avg_degree=6&features=8"


def _accepts(kind, world, **kw) -> bool:
    try:
        grid_shape(kind, world, **kw)
        return True
    except GridGnnError:
        return False


def brute_force(world: int) -> set:
    """Every configuration the library's grid checks accept, by trying every shape and replication."""
    if world == 1:
        return {("serial", None, 1, "random")}
    out = {(a, None, 1, p) for a in ("1d", "1d-sa") for p in ROW_PARTITIONS}
    out |= {(a, None, c, p) for a in ("1.5d", "1.5d-sa") for c in range(2, world + 1)
            if _accepts("1.5d", world, replication=c) for p in ROW_PARTITIONS
            if c < world or p == "random"}  # c = P: one row block, no partition to choose
    pairs = [(x, y) for x in range(1, world + 1) for y in range(1, world + 1) if _accepts("2d", world, shape=(x, y))]
    out |= {("2d", s, 1, o) for s in pairs for o in SUMMA_ORDERS}
    triples = [(x, y, world // (x * y)) for x in range(1, world + 1) for y in range(1, world + 1)
               if world % (x * y) == 0]
    assert all(_accepts("3d", world, shape=t) for t in triples)
    # no other triple is accepted: z is forced by x·y·z = P
    assert not any(_accepts("3d", world, shape=(x, y, z)) for x in range(1, world + 1)
                   for y in range(1, world + 1) for z in (1, 2, world) if x * y * z != world)
    out |= {("3d", t, 1, o) for t in triples for o in SUMMA_ORDERS}
    out |= {(a, t, 1, o) for a in ("plexus", "plexus-rs") for t in triples for o in PLEXUS_ORDERS}
    out.add(("edge", None, 1, "random"))  # one configuration: the edges split by count
    return out


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=1, max_value=64))
def test_candidates_are_exactly_the_valid_configurations(world):
    listed = [(c.algo, c.grid, c.replication, c.partition) for c in candidates(world, row_partitions=ROW_PARTITIONS)]
    assert len(listed) == len(set(listed)), "a configuration is listed twice"
    assert set(listed) == brute_force(world)


def test_every_candidate_is_a_config_the_trainer_accepts():
    for world in (1, 4, 6, 8, 12):
        for cand in candidates(world):
            assert Candidate.from_options(cand.options()) == cand
            cfg = config_from_flags({"nproc": world, **cand.options()})
            if cand.grid is not None:
                assert tuple(cfg.mesh_shape(world)) == cand.grid
            elif world > 1:
                want = {"1d": (world,), "1d-sa": (world,), "edge": (1, world)}.get(
                    cand.algo, (world // cand.replication, cand.replication))
                assert tuple(cfg.mesh_shape(world)) == want


def test_candidates_leave_out_what_the_model_or_graph_cannot_run():
    assert all(c.partition == "random" for c in candidates(8, reads_destinations=True, summa_orders=("random",
                                                                                                      "double-perm"))
               if c.algo in ("2d", "3d"))
    def blocks(c):  # vertex blocks of each layout (docs/algorithms.md)
        if c.algo in ("1d", "1d-sa"):
            return 8
        if c.algo == "edge":  # one row block, held by every rank
            return 1
        if c.algo.startswith("1.5d"):
            return 8 // c.replication
        return {"2d": max(c.grid), "3d": max(c.grid[0] * c.grid[-1], c.grid[1])}.get(c.algo, max(c.grid))

    small = candidates(8, n=3)  # 3 vertices: no layout may cut them into more than 3 blocks
    assert small == [c for c in candidates(8) if blocks(c) <= 3]
    assert len(small) < len(candidates(8)) and not any(c.algo in ("1d", "1d-sa") for c in small)


@pytest.fixture(scope="module")
def graph():
    return load_graph(SBM, seed=0)


def test_plan_is_deterministic_and_ranked(graph):
    cfg = config_from_flags({"data": SBM, "nproc": 4, "algo": "1d", "hidden": 8})
    prof = Profile.from_json(json.loads(json.dumps(PROFILE)))
    a = plan_configs(cfg, graph, prof)
    b = plan_configs(cfg, graph, prof)
    strip = [[{k: v for k, v in r.items() if k != "simulate_s"} for r in rows] for rows in (a, b)]
    assert strip[0] == strip[1]
    assert len(a) == len(candidates(4, n=graph.n))
    times = [r["predicted_step_s"] for r in a]
    assert times == sorted(times) and [r["rank"] for r in a] == list(range(1, len(a) + 1))
    # the priced terms are the model's: comp + comm with θ = 1, 1, 0
    assert all(r["predicted_step_s"] == pytest.approx(r["comp_s"] + r["comm_s"]) for r in a)
    # less memory than the smallest configuration needs: nothing fits, and that is said
    tight = plan_configs(cfg, graph, prof, available_bytes=1)
    assert not any(r["fits"] for r in tight)


def test_plan_reports_progress_in_a_log(graph, monkeypatch, capsys):
    from gridgnn.train import console

    cfg = config_from_flags({"data": SBM, "nproc": 4, "algo": "1d", "hidden": 8})
    prof = Profile.from_json(json.loads(json.dumps(PROFILE)))
    seen = []
    rows = plan_configs(cfg, graph, prof, progress=lambda done, total: seen.append((done, total)))
    total = len(candidates(4, n=graph.n))
    assert seen == [(k, total) for k in range(1, total + 1)] and len(rows) == total
    # not a terminal: plain lines "plan: K of N configurations, T s, about S s left" on stderr (here every call)
    monkeypatch.setattr(console, "PROGRESS_EVERY_S", 0.0)
    progress = console.Progress(0, what="plan", unit="configurations")
    plan_configs(cfg, graph, prof, progress=progress)
    progress.close()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == total - 1  # the last call (all done) prints nothing: the table follows
    for k, line in enumerate(lines, 1):
        assert re.fullmatch(rf"plan: {k} of {total} configurations, \d+ s, about \d+ s left", line), line


def test_plan_estimates_memory_for_every_model(graph):
    """GAT, SAGE and a model of the user's own get a per-rank memory estimate on every configuration (from their
    traces); GAT's attention tensors (8 heads, one value per edge and head) make it exceed GCN's on each."""
    prof = Profile.from_json(json.loads(json.dumps(PROFILE)))
    algos = ["1d-sa", "1.5d", "2d", "plexus"]
    peaks = {}
    for model in ("gcn", "gat", "sage", "tests.api.zoo:GINMoved"):
        cfg = config_from_flags({"data": SBM, "nproc": 4, "algo": "1d", "hidden": 8, "model": model})
        rows = plan_configs(cfg, graph, prof, algos=algos)
        assert {r["config"]["algo"] for r in rows} == set(algos)
        peaks[model] = {json.dumps(r["config"], sort_keys=True): r["peak_memory_bytes"] for r in rows}
        assert all(isinstance(p, int) and p > 0 for p in peaks[model].values()), model
    for key, gat in peaks["gat"].items():
        assert gat > peaks["gcn"][key], key


PROFILE = {"name": "test", "device": "cpu", "cores": 2, "ranks_per_node": 0, "version": 1,
           "kernels": {"1": {"edge": 1e-9, "flop": 1e-10, "elem": 1e-9, "launch": 1e-5},
                       "2": {"edge": 5e-10, "flop": 5e-11, "elem": 5e-10, "launch": 1e-5}},
           "collectives": {"allreduce": {"2": [1e-4, 1e-9], "4": [3e-4, 2e-9]}},
           "links": {"intra": {"alpha_s": 1e-4, "bandwidth_Bps": 1e9},
                     "inter": {"alpha_s": 1e-3, "bandwidth_Bps": 8e9}}}


def test_a_plan_fits_where_the_trainers_memory_guard_accepts(graph):
    """The plan summed each rank's estimate, the runtime's shared pages once per rank, and refused (P - 1) × 205 MiB
    more than the trainer's guard needs: --algo auto found nothing that fits where training would run. Its boundary
    is now the guard's, to the byte."""
    from gridgnn.distributed.machine import RUNTIME_SHARED_BYTES
    from gridgnn.planner.memory import check_fits
    from gridgnn.train.optim import memory_state
    from gridgnn.train.planning import simulate_config
    from gridgnn.train.rank_layout import estimate_memory

    prof = Profile.from_json(json.loads(json.dumps(PROFILE)))  # 2 cores, every rank on one node
    cfg = config_from_flags({"data": SBM, "nproc": 4, "algo": "1d", "hidden": 8, "partition": "random"})
    vol, shape, source, rows = simulate_config(cfg, graph)
    dims = [graph.num_features, 8, graph.num_classes]
    est = estimate_memory(graph, source, "1d", shape, dims, rows=rows, elem_bytes=4, dropout=cfg.dropout,
                          device="cpu", trace=vol.trace, optimizer_state=memory_state(cfg),
                          keep_best=cfg.keep == "best", handed=True)  # (the spawned ranks' guard: they hold shards)
    need = est.peak.total * 4 - 3 * RUNTIME_SHARED_BYTES  # four ranks' peaks, the shared pages once
    check_fits(est, need, nproc_local=4)
    with pytest.raises(GridGnnError):
        check_fits(est, need - 1, nproc_local=4)
    for avail, fits in ((need, True), (need - 1, False)):
        (row,) = [r for r in plan_configs(cfg, graph, prof, available_bytes=avail, algos=["1d"], jobs=1)
                  if r["config"].get("partition", "random") == "random"]
        assert row["peak_memory_bytes"] == est.peak.total and row["fits"] is fits, (avail, row)


def test_collective_prices():
    p = Profile.from_json(dict(PROFILE))
    nb, calls = np.array([1e6, 2e6]), np.array([3.0, 1.0])
    np.testing.assert_allclose(p.collective_time("allreduce", 4, 1, nb, calls), 3e-4 * calls + 2e-9 * nb)
    # a group size not measured: the nearest one's β, α scaled by the ring's steps (8-1)/(4-1)
    np.testing.assert_allclose(p.collective_time("allreduce", 8, 1, nb, calls), 3e-4 * 7 / 3 * calls + 2e-9 * nb)
    # a collective not measured: the link's α per step (a broadcast's tree: log2 g steps) and bandwidth
    np.testing.assert_allclose(p.collective_time("bcast", 4, 1, nb, calls), 1e-4 * 2 * calls + nb / 1e9)
    np.testing.assert_allclose(p.collective_time("alltoallv", 4, 1, nb, calls), 1e-4 * 3 * calls + nb / 1e9)
    # across nodes (4 ranks per node, stride 2: groups span nodes), the node's bandwidth shared by min(4, 2) groups
    p.ranks_per_node = 4
    np.testing.assert_allclose(p.collective_time("allreduce", 4, 2, nb, calls), 1e-3 * 3 * calls + nb / (8e9 / 2))
    assert not p.spans_nodes(4, 1) and p.spans_nodes(4, 2)


def test_compute_of_ranks_sharing_cores():
    p = Profile.from_json(dict(PROFILE))
    work = {"edge": np.array([1e6, 2e6, 2e6, 2e6]), "nnz": np.zeros(4), "flop": np.zeros(4), "elem": np.zeros(4),
            "launch": np.zeros(4)}
    # 4 one-thread ranks on 2 cores: the sum over ranks / 2 (3.5 ms), more than the slowest rank alone (2 ms)
    assert predict_step(p, {}, {}, work, 4, threads=1)["comp_s"] == pytest.approx(3.5e-3)
    skewed = dict(work, edge=np.array([8e6, 1e6, 1e6, 1e6]))  # the slowest rank (8 ms) bounds it
    assert predict_step(p, {}, {}, skewed, 4, threads=1)["comp_s"] == pytest.approx(8e-3)
    p.cores = 0  # a device per rank: the slowest rank
    assert predict_step(p, {}, {}, work, 4, threads=1)["comp_s"] == pytest.approx(2e-3)
    # 2 ranks per node, each node's 2 cores: the busiest node's sum / 2 (2 ms, not all 4 ranks' 3.5), its memory too
    p.cores, p.ranks_per_node = 2, 2
    assert predict_step(p, {}, {}, work, 4, threads=1)["comp_s"] == pytest.approx(2e-3)
    assert p.node_total([1.0, 2.0, 3.0, 5.0]) == 8.0 and p.node_ranks(4) == 2 and p.node_ranks(1) == 1


@pytest.mark.parametrize("change, words", [
    (lambda p: p["kernels"].update({"01": p["kernels"].pop("1")}), "kernels['01']"),  # (a KeyError when priced)
    (lambda p: p["collectives"]["allreduce"].update({"1": [1e-4, 1e-9]}), "group sizes >= 2"),  # (divided by 0)
    (lambda p: p["kernels"].update({"1": {}}), "kernels['1'] prices no flop/elem/launch"),  # (everything free)
    # (plan --out and --algo auto's summary then failed on writing NaN into JSON, after all the work)
    (lambda p: p.setdefault("fit", {}).update({"median_rel_err": float("nan")}), "fit['median_rel_err'] must be one of"),
    (lambda p: p.setdefault("fit", {}).update({"runs": "abc"}), "fit['runs'] must be"),  # (printed as "fitted to abc runs")
    (lambda p: p.update({"collective": p.pop("collectives")}), "unknown key 'collective'"),  # (priced from links)
    (lambda p: p.update({"cores": True}), "cores and ranks_per_node must be integers"),
])
def test_a_profile_the_prices_cannot_read_is_refused(change, words):
    prof = json.loads(json.dumps(PROFILE))
    change(prof)
    with pytest.raises(GridGnnError, match=re.escape(words)):
        Profile.from_json(prof)


def test_a_profile_whose_prices_overflow_is_one_error(graph):
    huge = json.loads(json.dumps(PROFILE))
    huge["kernels"] = {"1": {"edge": 1e308, "flop": 1e308, "elem": 1e308, "launch": 1e308}}
    cfg = config_from_flags({"data": SBM, "nproc": 2, "algo": "1d", "hidden": 8})
    with pytest.raises(GridGnnError, match="its numbers are too large"):
        plan_configs(cfg, graph, Profile.from_json(huge), algos=["1d"], jobs=1)


@settings(max_examples=20, deadline=None)
@given(st.floats(0.2, 5.0), st.floats(0.2, 5.0), st.floats(0.0, 0.05), st.integers(0, 2 ** 31))
def test_fit_recovers_the_coefficients(tc, tm, t0, seed):
    rng = np.random.default_rng(seed)
    rows = [(c, m, tc * c + tm * m + t0) for c, m in rng.uniform(0.01, 1.0, size=(8, 2))]
    p = Profile.from_json(dict(PROFILE))
    fit = fit_profile(p, rows)
    assert fit["comp"] == pytest.approx(tc, rel=1e-6, abs=1e-8)
    assert fit["comm"] == pytest.approx(tm, rel=1e-6, abs=1e-8)
    assert fit["const_s"] == pytest.approx(t0, abs=1e-8)
    assert fit["median_rel_err"] < 1e-8


def test_a_fit_the_runs_cannot_determine_is_refused_and_ties_rank_by_the_model():
    """Three copies of one run (or runs of one process, with no communication) fitted θ = (0, 0, their time) with
    "error 0.0%", and every plan then tied and ranked by listing order."""
    p = Profile.from_json(dict(PROFILE))
    with pytest.raises(GridGnnError, match="1 distinct configuration"):
        fit_profile(p, [(0.01, 0.02, 0.1)] * 3)
    with pytest.raises(GridGnnError, match="none of them communicating"):
        fit_profile(p, [(0.01, 0.0, 0.1), (0.02, 0.0, 0.2), (0.03, 0.0, 0.3)])
    from gridgnn.planner.plan import rank_rows

    tied = [{"fits": True, "predicted_step_s": 0.1, "comp_s": 0.01, "comm_s": c} for c in (0.05, 0.01, 0.03)]
    assert [r["comm_s"] for r in sorted(rank_rows(tied), key=lambda r: r["rank"])] == [0.01, 0.03, 0.05]


def test_plan_cli_and_algo_auto(tmp_path):
    common = ["--data", SBM, "--hidden", 8, "--nproc", 2]
    r, codes = cli_batch([
        ["plan", *common, "--profile", "perlmutter-a100", "--out", tmp_path / "plan.json"],
        ["train", *common, "--algo", "auto", "--profile", "perlmutter-a100", "--epochs", 2, "--quiet",
         "--out", tmp_path / "auto"],
        # a rerun of it on an algorithm of one's choosing (the file's profile no longer applies)
        ["train", "--config", tmp_path / "auto", "--algo", "2d", "--epochs", 1, "--quiet", "--out", tmp_path / "re"],
    ])
    assert codes == [0, 0, 0], r.stderr[-3000:]
    assert json.loads((tmp_path / "re" / "summary.json").read_text())["algo"] == "2d"
    plan = json.loads((tmp_path / "plan.json").read_text())
    summary = json.loads((tmp_path / "auto" / "summary.json").read_text())
    pick = plan["configs"][0]
    assert summary["plan"]["picked"] == pick["config"]
    assert summary["plan"]["predicted_step_s"] == pytest.approx(pick["predicted_step_s"])
    assert summary["algo"] == pick["config"]["algo"] and summary["partition"] == pick["config"]["partition"]
    assert summary["plan"]["measured_step_s"] == summary["epoch_time_median_s"]
    assert summary["config"]["algo"] == "auto"  # a rerun from this summary plans again
    # the pick as a command line that runs the job planned: the plan's own flags, then the configuration's
    import shlex

    from gridgnn.cli import build_parser

    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("pick: "))
    argv = shlex.split(line[len("pick: "):].split("  (planned in")[0])
    assert argv[:2] == ["gridgnn", "train"]
    args = build_parser().parse_args(argv[1:])
    assert (args.data, args.hidden, args.nproc, args.algo) == (SBM, 8, 2, pick["config"]["algo"])
    assert args.partition == pick["config"]["partition"]


@pytest.mark.parametrize("algos", ["1d", "plexus,1d", "2d,plexus"])
def test_the_pick_line_overlaps_where_the_pick_does(capsys, algos):
    """plan --overlap prices an algorithm that overlaps nothing without it: its pick line must not say --overlap
    (train refuses it there); a listing where none overlaps is refused (test_plan_refuses_what_no_candidate_reads)."""
    import shlex

    from gridgnn.cli import build_parser

    assert run_main(["plan", "--data", SBM, "--nproc", 2, "--hidden", 8, "--overlap", "--algos", algos]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("pick: "))
    args = build_parser().parse_args(shlex.split(line[len("pick: "):].split("  (planned in")[0])[1:])
    assert args.algo in algos.split(",") and bool(getattr(args, "overlap", False)) == (args.algo in
                                                                                        overlap_algorithms())


def test_plan_without_a_configuration_to_pick_says_so(capsys):
    """Every configuration over --memory: no pick line to run (it printed one train refuses); every candidate
    left out by --grad-dtype: one error line (was an IndexError traceback)."""
    assert run_main(["plan", "--data", SBM, "--nproc", 2, "--hidden", 8, "--memory", 0.01]) == 0
    out = capsys.readouterr().out
    assert "pick: none, no configuration fits in the memory available" in out and "gridgnn train" not in out
    assert run_main(["plan", "--data", SBM, "--nproc", 2, "--grad-dtype", "bfloat16", "--algos", "plexus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--grad-dtype applies where the trainer all-reduces" in err[0], err


@pytest.mark.parametrize("flags, words", [
    (["--nproc", 4, "--algos", "2d,plexus", "--partitions", "metis"],
     "--partitions metis orders the rows of the 1D/1.5D candidates; --algos 2d,plexus of 4 processes have none"),
    (["--nproc", 1, "--partitions", "random"], "the candidates of 1 process have none"),
    (["--nproc", 4, "--algos", "plexus,edge", "--overlap"], "--overlap prices transfers hidden behind the work"),
])
def test_plan_refuses_what_no_candidate_reads(capsys, flags, words):
    """--partitions and --overlap where no candidate of the listed algorithms reads them (they were accepted,
    and the plan was the same without them); a listing that reads them plans."""
    assert run_main(["plan", "--data", SBM, "--hidden", 8, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert run_main(["plan", "--data", SBM, "--hidden", 8, "--nproc", 2, "--algos", "1d,plexus", "--partitions",
                     "random", "--overlap"]) == 0


@pytest.mark.parametrize("flags, words", [
    (["--algo", "auto", "--nproc", "4", "--grid", "2,2"], "--grid cannot be combined"),
    (["--algo", "auto", "--nproc", "4", "--replication", "2"], "--replication cannot be combined"),
    (["--algo", "1d", "--nproc", "2", "--profile", "local-cpu"], "--profile applies to --algo auto"),
    (["--algo", "auto", "--nproc", "2", "--profile", "nosuch"], "neither a file nor a preset"),
])
def test_algo_auto_refuses_what_it_chooses(capsys, flags, words):
    assert run_main(["train", "--data", SBM, *flags]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("gridgnn: error:") and words in err[0], err


@pytest.mark.parametrize("command", [["plan", "--nproc", 4], ["simulate", "--nproc", 1],
                                     ["train", "--algo", "auto", "--nproc", 2]])
def test_plans_refuse_data_training_refuses(tmp_path, capsys, command):
    """A graph without labels was an IndexError traceback from the priced loss in plan, simulate and --algo auto,
    which train refuses in one line; a plan is made only for data a run accepts."""
    path = tmp_path / "e.txt"
    path.write_text("0 1\n1 2\n")
    assert run_main([*command, "--data", f"edgelist:{path}"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == ["gridgnn: error: node classification needs labels of at least 2 classes; this graph's labels "
                   "have none"], err


def test_algo_auto_from_python_with_a_graph_in_memory(graph):
    import gridgnn

    summary = gridgnn.train(gridgnn.TrainConfig(algo="auto", epochs=1, hidden=8, quiet=True), graph=graph)
    assert summary["plan"]["picked"]["algo"] == "serial" and summary["plan"]["candidates"] == 1
    assert summary["algo"] == "serial" and summary["plan"]["measured_step_s"] == summary["epoch_time_median_s"]


def test_overlap_hides_the_gradient_buckets_but_the_last_up_to_the_backward():
    """The gradient all-reduce in b buckets under --overlap: all but the last bucket's share runs during the
    backward, so (1 - 1/b) of its time on the first axis is hidden (narrowed: of its all-to-all half), up to the
    backward's compute (2/3 of the step's); one bucket hides nothing, nor does a second axis (SUMMA's fiber)."""
    from gridgnn.planner.primitives import WORK_UNITS
    from gridgnn.planner.timing import load_profile

    profile = load_profile("perlmutter-a100")
    P, axes = 4, {"fetch": (4, 1), "fiber": (2, 1)}
    for flop in (1e13, 1e6):  # compute larger, then smaller, than what the buckets could hide
        work = {u: np.zeros(P) for u in WORK_UNITS}
        work["flop"] = np.full(P, flop)
        for b in (1, 4):
            for narrow in (False, True):
                sent, calls = np.full(P, 3e8), np.full(P, float(b * (2 if narrow else 1)))
                detail = {("grad", "allreduce", "fetch"): (sent, sent, calls),
                          ("grad", "allreduce", "fiber"): (sent, sent, calls)}
                plain, early = (predict_step(profile, detail, axes, work, P, 1, overlap=o, grad_buckets=b,
                                             grad_narrow=narrow) for o in (False, True))
                t = profile.collective_time("allreduce", 4, 1, sent, calls) * profile.core_sharing(P, 4, 1)
                comp = np.asarray(plain["comp_rank_s"])
                want = np.minimum(t * (1 - 1 / b) * (0.5 if narrow else 1.0), comp * 2 / 3)
                np.testing.assert_allclose(early["hidden_rank_s"], want, rtol=1e-12)
                assert (np.array(early["hidden_rank_s"]) > 0).all() == (b > 1)


def test_overlap_hides_the_stage_transfers_up_to_the_products():
    """--overlap in the time model: each rank's communication loses what the stage loops' transfers (their
    broadcasts and pushes, all but a loop's first) and its sparse products have in common — the smaller of the two;
    sparsity-aware, what the halo's all-to-allv and the product of the block's own rows have in common; and the
    gradient all-reduce but its last bucket, up to the compute. Plan and --algo auto carry the choice."""
    import numpy as np

    from gridgnn.graph.spec import load_graph
    from gridgnn.planner.timing import HALO, OVERLAPPED, load_profile, predict_step
    from gridgnn.train.invocation import config_from_flags
    from gridgnn.train.planning import resolve_auto, simulate_config

    spec = "synthetic:sbm?n=400&classes=4&avg_degree=8&features=32"
    graph = load_graph(spec, seed=0)
    profile = load_profile("perlmutter-a100")
    for algo in ("1d", "2d", "1d-sa"):
        cfg = config_from_flags({"data": spec, "algo": algo, "nproc": 4, "hidden": 16})
        vol, *_ = simulate_config(cfg, graph)
        plain, early = (predict_step(profile, vol.detail, vol.axes, vol.work, vol.world, 1, overlap=o,
                                     **vol.overlap_facts()) for o in (False, True))
        hidden = np.array(early["hidden_rank_s"])
        staged, halo = np.zeros(vol.world), np.zeros(vol.world)
        for (phase, coll, axis), (sent, recv, calls) in vol.detail.items():
            members, stride = vol.axes[axis]
            t = profile.collective_time(coll, members, stride, np.maximum(sent, recv), calls)
            if (phase, coll) in OVERLAPPED and members > 1:
                staged += t * (1 - 1 / members)
            if (phase, coll) in HALO and members > 1:
                halo += t
            if phase == "grad":  # one bucket (the model is far below 25 MiB): nothing of it is hidden
                assert (calls == 1).all()
        comp = np.asarray(plain["comp_rank_s"])
        kappa = profile.kernel(1)
        prod = sum(kappa.get(u, 0.0) * np.asarray(vol.work[u], dtype=float) for u in ("edge", "nnz"))
        assert vol.grad_buckets == 1 and (vol.own_share is not None) == (algo == "1d-sa")
        share = np.zeros(vol.world) if vol.own_share is None else vol.own_share
        assert (share > 0).all() == (algo == "1d-sa") and (share < 1).all()
        want = np.minimum(np.minimum(staged, prod) + np.minimum(halo, share * prod), comp)
        np.testing.assert_allclose(hidden, want, rtol=1e-12)
        assert (hidden > 0).all() and (staged > 0).any() == (algo != "1d-sa") and (halo > 0).any() == (algo == "1d-sa")
        np.testing.assert_allclose(early["comm_rank_s"], np.array(plain["comm_rank_s"]) - hidden, rtol=1e-12)
        assert early["time_s"] < plain["time_s"]
    cfg = config_from_flags({"data": spec, "algo": "auto", "nproc": 4, "hidden": 16, "overlap": True})
    picked, row, _ = resolve_auto(cfg, graph, profile=profile, check_memory=False)
    assert picked.overlap == (picked.algo in overlap_algorithms()) == row["config"].get("overlap", False)


def test_algo_auto_says_when_its_pick_has_no_overlap(monkeypatch, capsys):
    """--algo auto --overlap prices overlap where an algorithm has it; a pick without it (here: Plexus) says that
    --overlap went unused, where it used to drop it without a word."""
    import dataclasses

    from gridgnn.train import api, launching
    from gridgnn.train.config import TrainConfig

    def plexus(cfg, graph, **kw):
        picked = dataclasses.replace(cfg, algo="plexus", overlap=False, profile=None)
        return picked, {"name": "plexus 1x2x1", "predicted_step_s": 0.001, "config": {"algo": "plexus"}}, 9

    monkeypatch.setattr(api, "resolve_auto", plexus)
    monkeypatch.setattr(launching, "launch_ranks", lambda worker, cfg, graph, *a, **kw: [{"epoch_time_median_s": 0.1,
                                                                                         "config": {}}])
    for overlap in (True, False):
        cfg = TrainConfig(data=SBM, hidden=8, nproc=2, algo="auto", epochs=1, overlap=overlap)
        cfg.validate()
        config = api.run(cfg)["config"]
        line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("--algo auto:")]
        assert len(line) == 1 and line[0].endswith("; --overlap: plexus has none)") == overlap, line
        # the summary's config is what was asked (its --overlap too): --config DIR plans the same question again
        assert config["algo"] == "auto" and config["overlap"] == overlap, config


def test_algo_auto_loads_its_data_once(monkeypatch):
    """--algo auto plans on the graph of its SPEC and hands the same graph, unchanged by the planning, to the ranks
    it spawns (they get shards of it): the SPEC is loaded (here: generated) once."""
    import gridgnn.graph.spec as spec
    from gridgnn.train import api, data_checks, launching
    from gridgnn.train.config import TrainConfig

    loads, handed = [], []
    real = spec.load_graph

    def counting(data, **kw):
        loads.append(data)
        return real(data, **kw)

    @contextlib.contextmanager
    def handed_over(cfg, graph, **kw):  # what the ranks would get, instead of spawning them
        handed.append(graph)
        yield None

    for where in (spec, data_checks, launching):  # every name the run may load a graph through
        monkeypatch.setattr(where, "load_graph", counting)
    monkeypatch.setattr(launching, "handed_over", handed_over)
    monkeypatch.setattr(launching, "launch_ranks", lambda worker, cfg, graph, *a, **kw: [{"epoch_time_median_s": 0.1,
                                                                                         "config": {}}])
    cfg = TrainConfig(data=SBM, hidden=8, nproc=2, algo="auto", profile="perlmutter-a100", epochs=1, quiet=True)
    cfg.validate()
    api.run(cfg)
    assert loads == [SBM] and len(handed) == 1
    fresh = real(SBM)
    assert handed[0].x.tobytes() == fresh.x.tobytes() and handed[0].edge_index()[0].tobytes() == \
        fresh.edge_index()[0].tobytes()
