"""avalanche-lib 0.6.0, avalanche/models/pnn.py:79 (gradguard GG001, error): FALSE, shown clean.

`MLPAdapter.forward(x)` does `for i, el in enumerate(x): x[i] = self.alphas[i] * el` then
`torch.cat(x, dim=1)`.  `x` is a Python list of the previous columns' activations (`PNN` builds
`x = [x for _ in range(num_columns)]`, each layer returns a list, `PNNColumn` passes `x[:-1]`, a list
slice), so `x[i] = ...` rebinds a list item: no tensor is written.  gradguard takes it for an in-place
write of the tensor `*` saved.  Below, `MLPAdapter` and the `PNNColumn.forward` that calls it are copied
faithfully from pnn.py:38-129 (avalanche imports its benchmarks and much more) and trained.

    python bench/repro/avalanche_pnn_list_items_clean.py     # exits 0 when clean
"""

import torch
import torch.nn.functional as F
from torch import nn


class MLPAdapter(nn.Module):  # pnn.py:38
    def __init__(self, in_features, out_features_per_column, num_prev_modules, activation=F.relu):
        super().__init__()
        self.num_prev_modules = num_prev_modules
        self.activation = activation
        if num_prev_modules == 0:
            return
        self.V = nn.Linear(in_features * num_prev_modules, out_features_per_column)
        self.alphas = nn.Parameter(torch.randn(num_prev_modules))
        self.U = nn.Linear(out_features_per_column, out_features_per_column)

    def forward(self, x):
        if self.num_prev_modules == 0:
            return 0
        assert len(x) == self.num_prev_modules
        assert len(x[0].shape) == 2
        for i, el in enumerate(x):
            x[i] = self.alphas[i] * el  # line 79
        x = torch.cat(x, dim=1)
        x = self.U(self.activation(self.V(x)))
        return x


class PNNColumn(nn.Module):  # pnn.py:85, mlp adapter
    def __init__(self, in_features, out_features_per_column, num_prev_modules):
        super().__init__()
        self.itoh = nn.Linear(in_features, out_features_per_column)
        self.adapter = MLPAdapter(in_features, out_features_per_column, num_prev_modules)

    def forward(self, x):
        prev_xs, last_x = x[:-1], x[-1]
        hs = self.adapter(prev_xs)
        hs += self.itoh(last_x)
        return hs


torch.manual_seed(0)
first = nn.Linear(4, 6)
column = PNNColumn(6, 5, num_prev_modules=2)
h = F.relu(first(torch.randn(3, 4)))
xs = [h * 1.0, torch.tanh(h), F.relu(h)]  # previous columns' outputs, then this column's input
column(xs).sum().backward()
for name, p in list(column.named_parameters()) + [("first.weight", first.weight)]:
    assert p.grad is not None and torch.isfinite(p.grad).all(), name
print("PNNColumn with MLPAdapter: backward ok, every parameter has a gradient")
