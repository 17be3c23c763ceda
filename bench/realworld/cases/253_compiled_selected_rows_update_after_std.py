# Thread: https://github.com/pytorch/pytorch/issues/132597
# Title: "storing std of tensor leads to inplace backwards error"
# Diagnosis from the thread: a layer projects its input (x = self.a(x)), stores a statistic of the result for
# monitoring (self.std = x.std()), then updates only the selected rows in place, x[i] = self.b(x[i]). std saves
# x for its backward and the indexed assignment rewrites x afterwards. In eager the step runs only because the
# stored std never enters the loss, so its stale saved input is never read; under torch.compile the whole
# forward is traced together with its backward and compilation fails with the in-place error (raised at the
# forward call). As the title says, storing the std is what exposes the in-place write: take the statistic from
# a copy, or do the row update out of place.
# Kept: the two bias-free Linear layers, the stored std attribute, the indexed in-place update of selected rows,
# an int64 index tensor, the MSE backward, the model compiled with torch.compile. Added: float32 on CPU instead
# of half on CUDA, a residual block around the layer and one optimizer step.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class RowUpdate(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d, bias=False)
        self.row_proj = nn.Linear(d, d, bias=False)

    def forward(self, h, rows):
        h = self.proj(h)
        self.std = h.std()
        h[rows] = self.row_proj(h[rows])
        return h


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.layer = RowUpdate(d)

    def forward(self, x, i):
        return x + self.layer(self.norm(x), i)


if __name__ == "__main__":
    S, D = 5, 8
    model = torch.compile(Block(D))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(S, D), torch.randn(S, D)
    idx = torch.tensor([1, 2], dtype=torch.int64)
    loss = F.mse_loss(model(x, idx), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
