"""The host taking a device's code paths (``GRIDGNN_DEVICE_PATHS=host``, :mod:`gridgnn.ops.device_paths`) computes
what the host's own paths compute: every model's step serially (float64: logits and gradients to rounding), the
dropout masks bit for bit (drawn in torch ``int64`` from the ids' copies, where the host draws them with numba or
NumPy) — and it did take the other paths (the operations it dispatched). The distributed families on these paths:
``tests/parallel/test_staged.py`` (the ranks sharing a device, as a GPU run does) and
``tests/train/test_no_read_back.py``."""
import numpy as np
import pytest
from torch.utils._python_dispatch import TorchDispatchMode

import gridgnn

from gridgnn.errors import GridGnnError
from gridgnn.ops import device_paths, kernels
from gridgnn.testing import Case, serial_case

from ..parallel.conftest import EDGE_GRAPHS, GRAPHS, TYPED_GRAPHS


class Dispatched(TorchDispatchMode):
    """The names of the operations its block dispatched."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


#: model, graph, dims, options: every model, with node dropout (and attention dropout where it has one)
CASES = [("gcn", GRAPHS["directed"], [7, 6, 3], {}),
         ("sage", GRAPHS["directed"], [7, 6, 3], {"options": {"aggr": "mean"}}),
         ("sage", GRAPHS["undirected"], [7, 6, 3], {"options": {"aggr": "max"}}),
         ("gat", GRAPHS["directed"], [7, 3, 3], {"heads": 2, "attn_dropout": 0.3}),
         ("agnn", GRAPHS["undirected"], [7, 5, 5, 3], {}),
         ("va", GRAPHS["directed"], [7, 5, 3], {}),
         ("gatv2", EDGE_GRAPHS["undirected"], [7, 3, 3], {"heads": 2, "attn_dropout": 0.3,
                                                         "options": {"edge_dim": 4}}),
         ("gine", EDGE_GRAPHS["directed"], [7, 5, 3], {"options": {"edge_dim": 4, "eps": 0.25}}),
         ("rgcn", TYPED_GRAPHS["undirected"], [7, 9, 3], {"options": {"num_relations": 3, "bases": 2}})]


@pytest.mark.parametrize("model, graph, dims, options", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_the_device_paths_compute_what_the_host_paths_compute(model, graph, dims, options, monkeypatch):
    case = Case(graph, "serial", dims, model=model, dropout=0.4, seed=3, epoch=1, **options)
    monkeypatch.delenv(device_paths.ENV, raising=False)  # (the host's own paths, where a run sets it for all tests)
    with Dispatched() as on_host:
        host = serial_case(case)
    monkeypatch.setenv(device_paths.ENV, device_paths.HOST)
    with Dispatched() as on_device:
        device = serial_case(case)
    assert rel(device.logits, host.logits) < 1e-12
    assert len(device.grads) == len(host.grads)
    for g, h in zip(device.grads, host.grads):
        assert rel(g, h) < 1e-12
    assert device.loss == pytest.approx(host.loss, rel=1e-12)
    # the masks were hashed in torch int64 (the host hashes in numba or NumPy); rows were gathered by each edge's
    # row, kept with the pattern (the host walks the CSR pointer in numba, or gathers through a row made for the call)
    assert "bitwise_xor" in on_device.names - on_host.names
    if not kernels.enabled():  # (the host's own paths are the torch compositions too: nothing else differs)
        return
    if model in ("gat", "agnn", "gatv2"):  # the edge softmax's row sums: segmented, in order (numba on the host)
        assert "segment_reduce" in on_device.names - on_host.names
    if options.get("options", {}).get("aggr") == "max":  # the selecting semiring's gradient: sorted, not atomic
        assert "index_put_" in on_device.names - on_host.names and "index_add_" in on_host.names - on_device.names
    else:  # torch's sparse product (an addmm onto an expanded zero: ops.pattern.sparse_times) where the host's numba
        # kernel multiplies
        assert "addmm" in on_device.names - on_host.names


def test_a_device_paths_value_other_than_host_is_an_error(monkeypatch):
    """At its first use, and before a run starts (the config's checks, in the launching process)."""
    monkeypatch.setenv(device_paths.ENV, "1")
    with pytest.raises(GridGnnError, match="GRIDGNN_DEVICE_PATHS='1'"):
        device_paths.device_paths("cpu")
    with pytest.raises(GridGnnError, match="GRIDGNN_DEVICE_PATHS='1'"):
        gridgnn.TrainConfig(data="synthetic:sbm?n=100").validate()
    monkeypatch.setenv(device_paths.ENV, "")
    assert not device_paths.device_paths("cpu") and device_paths.device_paths("meta")
