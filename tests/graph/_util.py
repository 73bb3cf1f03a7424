"""Small random graphs shared by the tests of ``gridgnn.graph``."""
import numpy as np

from gridgnn.graph import Graph


def random_graph(n=30, m=80, *, directed=True, weighted=False, seed=0, isolated=3, loops=2, f=5, classes=3,
                 node_data=True) -> Graph:
    """Random graph whose last ``isolated`` vertices have no edges and whose first ``loops`` have self-loops."""
    r = np.random.default_rng(seed)
    src = np.concatenate([r.integers(0, n - isolated, m), np.arange(loops)])
    dst = np.concatenate([r.integers(0, n - isolated, m), np.arange(loops)])
    w = r.uniform(0.5, 2.0, src.size) if weighted else None
    kw = {}
    if node_data:
        tm = r.random(n) < 0.5
        kw = dict(x=r.normal(size=(n, f)).astype(np.float32), y=r.integers(0, classes, n),
                  train_mask=tm, val_mask=~tm & (r.random(n) < 0.5), test_mask=~tm)
    return Graph.from_edges(src, dst, n, weights=w, directed=directed, **kw)
