"""Graph container, loaders, normalization and synthetic generators."""
from .graph import Graph, gcn_normalize
from .loaders import (apply_defaults, default_split, degree_features, from_pyg, load_edgelist, load_mtx, load_npz,
                      load_planetoid, row_normalize, save_npz)
from .spec import DEFAULT_SPEC, load_graph, parse_spec
from .synthetic import planetoid_like_split, rmat_graph, sbm_graph
from .synthetic_geo import geometric_graph
from .sharded import ShardedDataset, write_sharded

__all__ = [
    "Graph", "gcn_normalize",
    "from_pyg", "load_planetoid", "load_edgelist", "load_mtx", "load_npz", "save_npz",
    "degree_features", "default_split", "apply_defaults", "row_normalize",
    "sbm_graph", "rmat_graph", "planetoid_like_split", "geometric_graph",
    "ShardedDataset", "write_sharded",
    "DEFAULT_SPEC", "load_graph", "parse_spec",
]
