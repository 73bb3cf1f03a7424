r"""A GNN layer of your own, written once against gridgnn's public primitives and trained on every algorithm.

The layer is an *edge-gated graph convolution* (in no library in this form): GCN's propagation, with every
edge's weight modulated by a learned gate per head that looks at both of its ends,

.. math::
    X' = H W, \quad g_{uv,h} = \sigma\big(\langle X'_{u,h}, a^{dst}_h\rangle + \langle X'_{v,h}, a^{src}_h\rangle\big),
    \quad Y_{u,h} = \textstyle\sum_v \hat M_{uv}\, g_{uv,h}\, X'_{v,h} + b,

with ``K`` heads concatenated in the hidden layers and one head in the last. As primitives: ``linear →
head_scores (×2) → sddmm_add → sigmoid (elementwise on the edges) → × gcn_values → spmm → add_bias``.
Nothing here knows about processes, blocks or communication — the plan does.

Run it:

.. code-block:: bash

    python examples/custom_layer.py                          # from Python: serial, then 1d-sa on 2 processes
    gridgnn train --model examples.custom_layer:EdgeGatedGCN --algo 2d --nproc 4 --epochs 50   # from the CLI
"""
from __future__ import annotations

import torch

import gridgnn
from gridgnn.nn import Model, Option, register_model


@register_model("edge-gated-gcn")
class EdgeGatedGCN(Model):
    r"""Args:
        dims (list[int]): ``[f_0, F_1, ..., F_L]``: input width, per-head width of each hidden layer, classes.
        heads (int, optional): heads of the hidden layers (concatenated); the last layer has one. (default: ``2``)
        dropout (float, optional): dropout on every layer's input. (default: ``0.5``)
    """

    # takes --heads from the command line / TrainConfig: its type, default and range, checked before a run starts
    OPTIONS = {"heads": Option(int, 2, low=1, high=64, help="gate heads of the hidden layers")}
    reads_destinations = True  # the gate reads a score of the destination (sddmm_add)

    def __init__(self, dims, *, heads: int = 2, **kw):
        super().__init__(dims, **kw)
        self.heads = int(heads)
        for layer in range(self.num_layers):
            k, f_in, f_out = self.layer_heads(layer), self.in_width(layer), self.dims[layer + 1]
            self.add_parameter("weight", layer, self.glorot(f_in, k * f_out), kind="w")
            self.add_parameter("gate_dst", layer, self.glorot(k, f_out), kind="att")
            self.add_parameter("gate_src", layer, self.glorot(k, f_out), kind="att")
            self.add_parameter("bias", layer, self.zeros(k * f_out), kind="b")

    def layer_heads(self, layer: int) -> int:
        return self.heads if layer < self.num_layers - 1 else 1

    def in_width(self, layer: int) -> int:
        return self.dims[0] if layer == 0 else self.heads * self.dims[layer]

    def forward(self, x: torch.Tensor, plan) -> torch.Tensor:
        h = x
        for layer in range(self.num_layers):
            weight, gate_dst, gate_src, bias = (self.param(name, layer)
                                                for name in ("weight", "gate_dst", "gate_src", "bias"))
            h = self.input_dropout(h, plan, layer, self.in_width(layer))
            g = plan.graph(layer)
            xw = plan.linear(layer, h, weight)  # n × K·F
            gate = torch.sigmoid(g.sddmm_add(plan.head_scores(layer, xw, gate_dst),
                                             plan.head_scores(layer, xw, gate_src)))  # nnz × K
            h = g.spmm(gate * g.gcn_values.unsqueeze(1), xw)  # Σ_v M̂_uv g_uv X'_v, per head
            h = plan.add_bias(layer, h, bias)
            if layer < self.num_layers - 1:
                h = torch.relu(h)
        return h


def main() -> None:
    cora = "../shared/data/planetoid/cora"
    import os

    data = f"planetoid:{cora}" if os.path.isdir(cora) else None  # else the embedded synthetic SBM
    common = dict(data=data, model="edge-gated-gcn", heads=4, hidden=8, epochs=100, lr=0.01, dropout=0.5,
                  dtype="float64", quiet=True)  # float64: the two runs agree to rounding, not only in spirit
    serial = gridgnn.train(gridgnn.TrainConfig(**common))
    dist = gridgnn.train(gridgnn.TrainConfig(**common, algo="1d-sa", nproc=2))
    for name, s in (("serial", serial), ("1d-sa, 2 processes", dist)):
        print(f"{name:>20}: test accuracy {s['test_acc']:.4f} (best epoch {s['best_epoch']}), "
              f"{s['comm_bytes_per_epoch']['total'] / 1e6:.2f} MB moved per epoch")


if __name__ == "__main__":
    main()
