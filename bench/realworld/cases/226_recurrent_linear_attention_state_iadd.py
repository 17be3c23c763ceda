# Source: https://github.com/idiap/fast-transformers/pull/10
# Title: "Replace inplace operations in recurrent linear attention"
# Diagnosis from the thread: the recurrent (autoregressive) linear attention keeps its running sums Si and Zi
# as state and updates them with `Zi += K` / `Si += einsum(K, V)`; the previous step's output was computed from
# those same tensors (einsum saved them), so when several steps are chained into one graph the in-place updates
# break backward. The PR replaces them with out-of-place updates (the maintainer kept the in-place fast path
# only for tensors without a grad_fn). Kept from the thread: RecurrentLinearAttention.forward(query, key, value,
# state) with the elu+1 feature map, zero-initialised Si/Zi when state is None, the in-place updates, the
# returned [Si, Zi] state, and a decoder loop feeding the state back step by step. Added: a tiny recurrent
# transformer layer around it, sizes, the loss.
import torch
import torch.nn as nn
import torch.nn.functional as F


def elu_feature_map(x):
    return F.elu(x) + 1


class RecurrentLinearAttention(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, query, key, value, state=None):
        Q = elu_feature_map(query)
        K = elu_feature_map(key)
        N, H, D = Q.shape
        _, _, M = value.shape
        if state is None:
            Si = query.new_zeros((N, H, D, M))
            Zi = query.new_zeros((N, H, D))
        else:
            Si, Zi = state
        Zi += K
        Si += torch.einsum("nhd,nhm->nhdm", K, value)
        Z = 1.0 / (torch.einsum("nhd,nhd->nh", Q, Zi) + self.eps)
        V = torch.einsum("nhd,nhdm,nh->nhm", Q, Si, Z)
        return V, [Si, Zi]


class RecurrentAttentionLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.inner_attention = RecurrentLinearAttention()
        self.query_projection = nn.Linear(d_model, d_model)
        self.key_projection = nn.Linear(d_model, d_model)
        self.value_projection = nn.Linear(d_model, d_model)
        self.out_projection = nn.Linear(d_model, d_model)
        self.n_heads = n_heads

    def forward(self, x, state=None):
        N, D = x.shape
        H = self.n_heads
        q = self.query_projection(x).view(N, H, -1)
        k = self.key_projection(x).view(N, H, -1)
        v = self.value_projection(x).view(N, H, -1)
        new_value, state = self.inner_attention(q, k, v, state)
        return self.out_projection(new_value.reshape(N, -1)), state


if __name__ == "__main__":
    torch.manual_seed(0)
    layer = RecurrentAttentionLayer(d_model=8, n_heads=2)
    head = nn.Linear(8, 5)
    tokens = torch.randn(4, 3, 8)  # (time, batch, features)
    targets = torch.randint(0, 5, (4, 3))
    state = None
    loss = 0.0
    for t in range(tokens.shape[0]):
        out, state = layer(tokens[t], state)
        loss = loss + F.cross_entropy(head(out), targets[t])
    loss.backward()
    print("ok")
