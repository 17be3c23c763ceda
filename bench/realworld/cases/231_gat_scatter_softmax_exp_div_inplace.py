# Source: https://github.com/rusty1s/pytorch_scatter/issues/119
# Title: "RuntimeError on backward pass through scatter_softmax"
# Diagnosis from the thread: the library's scatter_softmax recentres the scores, exponentiates them in place
# (`exp_()`) and then normalises with an in-place division (`div_()`); exp_ saved its result for backward and
# div_ overwrites it, so a GAT layer using it fails at backward. The fix is to use out-of-place exp / div in
# scatter_softmax. Kept from the thread: the scatter_softmax algorithm (scatter max, gather, recentre, exp_,
# scatter sum + eps, gather, div_), its use to normalise edge attention scores per destination node in a GAT
# project, and the driver's src/index shapes. Added: scatter helpers written with torch's scatter_reduce /
# index_add (torch_scatter is not installed here), a one-layer GAT, the toy graph and loss.
import torch
import torch.nn as nn
import torch.nn.functional as F


def scatter_max(src, index, dim_size):
    out = torch.full((dim_size,) + src.shape[1:], float("-inf"))
    return out.scatter_reduce(0, index.view(-1, *([1] * (src.dim() - 1))).expand_as(src), src, reduce="amax")


def scatter_sum(src, index, dim_size):
    return torch.zeros((dim_size,) + src.shape[1:]).index_add(0, index, src)


def scatter_softmax(src, index, dim_size, eps=1e-12):
    max_value_per_index = scatter_max(src, index, dim_size)
    max_per_src_element = max_value_per_index.index_select(0, index)
    recentered_scores = src - max_per_src_element
    recentered_scores_exp = recentered_scores.exp_()
    sum_per_index = scatter_sum(recentered_scores_exp, index, dim_size)
    normalizing_constants = sum_per_index.add_(eps).index_select(0, index)
    return recentered_scores_exp.div_(normalizing_constants)


class GATLayer(nn.Module):
    def __init__(self, in_dim, out_dim, heads=2):
        super().__init__()
        self.heads, self.out_dim = heads, out_dim
        self.lin = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.att_src = nn.Parameter(torch.randn(heads, out_dim) * 0.1)
        self.att_dst = nn.Parameter(torch.randn(heads, out_dim) * 0.1)

    def forward(self, x, edge_index):
        src, dst = edge_index
        h = self.lin(x).view(-1, self.heads, self.out_dim)
        scores = F.leaky_relu((h[src] * self.att_src).sum(-1) + (h[dst] * self.att_dst).sum(-1), 0.2)
        alpha = scatter_softmax(scores, dst, dim_size=x.size(0))
        return scatter_sum(h[src] * alpha.unsqueeze(-1), dst, x.size(0)).mean(1)


if __name__ == "__main__":
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    edge_index = torch.tensor([[0, 1, 2, 0, 1, 2], [0, 1, 0, 1, 2, 1]])
    layer = GATLayer(4, 6)
    out = layer(x, edge_index)
    F.cross_entropy(out, torch.tensor([0, 3, 5])).backward()
    print("ok")
