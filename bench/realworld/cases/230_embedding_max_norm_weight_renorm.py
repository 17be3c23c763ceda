# Source: https://github.com/pytorch/pytorch/issues/26596
# Title: "nn.Embedding with max_norm shows unstable behavior and causes sometimes runtime error."
# Diagnosis from the thread (and the doc note added by PR #45595): with max_norm set, nn.Embedding's forward
# renormalises the looked-up rows of `weight` *in place*; the model first uses `embedding.weight` directly in a
# matmul (which saves it for backward) and only then calls the embedding, so backward fails - and swapping the two
# lines "fixes" it. The documented fix is to use a clone of the weight for the computation done before the
# lookup (`embedding.weight.clone() @ W.t()`). Kept from the thread: the scoring model combining all entity
# embeddings with the looked-up ones (a = weight @ W.T, b = embedding(idx) @ W.T, outer sum, sigmoid-prod loss),
# Adam over both. Added: a small knowledge-graph-style class around it.
import torch
import torch.nn as nn


class PairScorer(nn.Module):
    def __init__(self, n=3, d=5, m=7):
        super().__init__()
        self.embedding = nn.Embedding(n, d, max_norm=True)
        self.W = nn.Parameter(torch.randn((m, d)))

    def forward(self, idx):
        a = self.embedding.weight @ self.W.t()  # all entities
        b = self.embedding(idx) @ self.W.t()  # queried entities
        return a.unsqueeze(0) + b.unsqueeze(1)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = PairScorer()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    optimizer.zero_grad()
    idx = torch.tensor([1, 2])
    out = model(idx)
    loss = out.sigmoid().prod()
    loss.backward()
    optimizer.step()
    print("ok")
