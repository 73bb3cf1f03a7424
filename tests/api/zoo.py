"""A zoo of layers a user writes from docs/custom-layer.md alone — some the naive way (a raw `+` across layouts, an
MLP inside a layer, features as sddmm_add operands), some the documented way. On every algorithm each must equal
its serial run or be refused before training (tests/api/test_layer_zoo.py)."""
import torch
import torch.nn.functional as F

from gridgnn.nn import Model, register_model


class _Zoo(Model):
    """Two or more layers, ``--heads`` heads in the hidden layers, one in the last; ReLU between layers."""

    OPTIONS = ("heads",)

    def __init__(self, dims, *, heads: int = 2, **kw):
        super().__init__(dims, **kw)
        self.heads = int(heads)
        for layer in range(self.num_layers):
            self.build(layer, self.in_width(layer), self.dims[layer + 1], self.layer_heads(layer))

    def layer_heads(self, layer):
        return self.heads if layer < self.num_layers - 1 else 1

    def in_width(self, layer):
        return self.dims[0] if layer == 0 else self.heads * self.dims[layer]

    def forward(self, x, plan):
        h = x
        for layer in range(self.num_layers):
            h = self.input_dropout(h, plan, layer, self.in_width(layer))
            h = self.layer(plan, layer, h, self.layer_heads(layer), self.dims[layer + 1])
            if layer < self.num_layers - 1:
                h = torch.relu(h)
        return h


@register_model("zoo-gatv2")
class GATv2(_Zoo):
    r"""GATv2 (Brody et al.): :math:`e_{uv} = a^\top \mathrm{LeakyReLU}(W_r x_u + W_l x_v)` — the LeakyReLU before the
    attention vector, so ``sddmm_add`` adds ``n × K·F`` features and the per-head dot is a raw torch op on edges."""

    reads_destinations = True

    def build(self, layer, f_in, f_out, k):
        self.add_parameter("w_src", layer, self.glorot(f_in, k * f_out))
        self.add_parameter("w_dst", layer, self.glorot(f_in, k * f_out))
        self.add_parameter("att", layer, self.glorot(k, f_out), kind="att")
        self.add_parameter("bias", layer, self.zeros(k * f_out), kind="b")

    def layer(self, plan, layer, h, k, f):
        g = plan.graph(layer)
        xl = plan.linear(layer, h, self.param("w_src", layer))
        xr = plan.linear(layer, h, self.param("w_dst", layer))
        e = F.leaky_relu(g.sddmm_add(xr, xl), 0.2)  # nnz × K·F
        score = (e.reshape(e.shape[0], k, f) * self.param("att", layer)).sum(dim=-1)  # nnz × K
        return plan.add_bias(layer, g.spmm(g.edge_softmax(score), xl), self.param("bias", layer))


@register_model("zoo-gin")
class GIN(_Zoo):
    """GIN with a learned ε written the naive way: ``spmm(h) + (1+ε)·h`` (two layouts on Plexus) and a two-linear MLP
    inside the layer."""

    def build(self, layer, f_in, f_out, k):
        self.add_parameter("eps", layer, self.zeros(1) + 0.1, kind="scalar")
        self.add_parameter("w1", layer, self.glorot(f_in, k * f_out))
        self.add_parameter("w2", layer, self.glorot(k * f_out, k * f_out))

    def layer(self, plan, layer, h, k, f):
        g = plan.graph(layer)
        h = g.spmm(None, h) + plan.scale(layer, h, 1 + self.param("eps", layer))
        return plan.linear(layer, torch.relu(plan.linear(layer, h, self.param("w1", layer))), self.param("w2", layer))


@register_model("zoo-gin-moved")
class GINMoved(_Zoo):
    """GIN as docs/custom-layer.md says: the skip term moved to the aggregation's layout with ``g.at_destinations``,
    ε applied by a raw product (its gradient summed where the layout needs it), one linear per layer."""

    def build(self, layer, f_in, f_out, k):
        self.add_parameter("eps", layer, self.zeros(1) + 0.1, kind="scalar")
        self.add_parameter("w", layer, self.glorot(f_in, k * f_out))
        self.add_parameter("bias", layer, self.zeros(k * f_out), kind="b")

    def layer(self, plan, layer, h, k, f):
        g = plan.graph(layer)
        h = g.spmm(None, h) + (1 + self.param("eps", layer)) * g.at_destinations(h)
        return plan.add_bias(layer, plan.linear(layer, h, self.param("w", layer)), self.param("bias", layer))


@register_model("zoo-residual")
class ResidualGCN(_Zoo):
    """GCN with a residual written the naive way: ``X W + M̂ X W``."""

    def build(self, layer, f_in, f_out, k):
        self.add_parameter("w", layer, self.glorot(f_in, k * f_out))

    def layer(self, plan, layer, h, k, f):
        g = plan.graph(layer)
        xw = plan.linear(layer, h, self.param("w", layer))
        return xw + g.spmm(g.gcn_values, xw)


@register_model("zoo-residual-moved")
class ResidualGCNMoved(ResidualGCN):
    """The same residual with ``g.at_destinations(X W)``."""

    def layer(self, plan, layer, h, k, f):
        g = plan.graph(layer)
        xw = plan.linear(layer, h, self.param("w", layer))
        return g.at_destinations(xw) + g.spmm(g.gcn_values, xw)


@register_model("zoo-two-linear")
class TwoLinear(_Zoo):
    """Two linears of one input (a root and a neighbour transform, SAGE-like), then the aggregation of their sum."""

    def build(self, layer, f_in, f_out, k):
        self.add_parameter("w1", layer, self.glorot(f_in, k * f_out))
        self.add_parameter("w2", layer, self.glorot(f_in, k * f_out))

    def layer(self, plan, layer, h, k, f):
        g = plan.graph(layer)
        xw = plan.linear(layer, h, self.param("w1", layer)) + torch.tanh(plan.linear(layer, h, self.param("w2", layer)))
        return g.spmm(g.gcn_values, xw)


@register_model("zoo-edge-mlp")
class EdgeMLP(_Zoo):
    """Attention whose score is a small MLP of the per-edge GAT scores (raw matmuls on an edge tensor with
    parameters read through ``self.param``)."""

    reads_destinations = True

    def build(self, layer, f_in, f_out, k):
        self.add_parameter("w", layer, self.glorot(f_in, k * f_out))
        self.add_parameter("a_dst", layer, self.glorot(k, f_out), kind="att")
        self.add_parameter("a_src", layer, self.glorot(k, f_out), kind="att")
        self.add_parameter("m1", layer, self.glorot(k, 4), kind="mlp")
        self.add_parameter("m2", layer, self.glorot(4, k), kind="mlp")

    def score(self, layer, s):
        return torch.tanh(s @ self.param("m1", layer)) @ self.param("m2", layer)

    def layer(self, plan, layer, h, k, f):
        g = plan.graph(layer)
        xw = plan.linear(layer, h, self.param("w", layer))
        s = g.sddmm_add(plan.head_scores(layer, xw, self.param("a_dst", layer)),
                        plan.head_scores(layer, xw, self.param("a_src", layer)))
        return g.spmm(g.edge_softmax(self.score(layer, s)), xw)


@register_model("zoo-edge-mlp-bare")
class EdgeMLPBare(EdgeMLP):
    """The same, reading the MLP's parameters as attributes instead of ``self.param``."""

    def score(self, layer, s):
        return torch.tanh(s @ getattr(self, f"m1_{layer}")) @ getattr(self, f"m2_{layer}")


class ScaledInput(_Zoo):
    """A learned scalar on each layer's input (``plan.scale``), then aggregate and transform: on Plexus the layer-0
    input is held split over the third axis, so the scalar's gradient is partial over it too."""

    def build(self, layer, f_in, f_out, k):
        self.add_parameter("s", layer, self.zeros(1) + 0.5, kind="scalar")
        self.add_parameter("w", layer, self.glorot(f_in, k * f_out))

    def layer(self, plan, layer, h, k, f):
        g = plan.graph(layer)
        return plan.linear(layer, g.spmm(g.gcn_values, plan.scale(layer, h, self.param("s", layer))),
                           self.param("w", layer))
