# Source: https://github.com/dalinvip/pytorch_word2vec/issues/2
# Title: "np.sum breaks gradient transfering"
# Thread: in the CBOW model of this word2vec port the context-word embeddings (u_embeddings) are
# looked up per window, summed with np.sum over `emb.data.numpy()`, turned into Python lists and
# re-wrapped with torch.FloatTensor; the reporter shows that u_embeddings never update because the
# numpy sum cuts the graph. The fix is to sum with torch (torch.sum / stack) so the loss reaches
# the context embeddings.
# Kept: the CBOW module with u/v embeddings of size 2*emb_size-1, init_emb (u uniform, v zero-ish),
# the forward over positive and negative windows (per-window lookup, numpy sum, FloatTensor
# rebuild, elementwise product, logsigmoid, summed losses), the SGD step on model.parameters().
# Added: a tiny vocabulary, windows, a nonzero v init so that u would receive gradient, and the
# comparison with the torch-sum forward.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CBOW(nn.Module):
    def __init__(self, emb_size, emb_dimension):
        super().__init__()
        self.emb_size = emb_size
        self.emb_dimension = emb_dimension
        self.u_embeddings = nn.Embedding(2 * emb_size - 1, emb_dimension)
        self.v_embeddings = nn.Embedding(2 * emb_size - 1, emb_dimension)
        self.init_emb()

    def init_emb(self):
        bound = 0.5 / self.emb_dimension
        with torch.no_grad():
            self.u_embeddings.weight.uniform_(-bound, bound)
            self.v_embeddings.weight.uniform_(-bound, bound)

    def forward(self, pos_u, pos_v, neg_u, neg_v):
        losses = []
        emb_u = []
        for i in range(len(pos_u)):
            emb_ui = self.u_embeddings(torch.LongTensor(pos_u[i]))
            emb_u.append(np.sum(emb_ui.data.numpy(), axis=0).tolist())
        emb_u = torch.FloatTensor(emb_u)
        emb_v = self.v_embeddings(torch.LongTensor(pos_v))
        score = torch.mul(emb_u, emb_v)
        score = F.logsigmoid(torch.sum(score, dim=1))
        losses.append(sum(score))

        neg_emb_u = []
        for i in range(len(neg_u)):
            neg_emb_ui = self.u_embeddings(torch.LongTensor(neg_u[i]))
            neg_emb_u.append(np.sum(neg_emb_ui.data.numpy(), axis=0).tolist())
        neg_emb_u = torch.FloatTensor(neg_emb_u)
        neg_emb_v = self.v_embeddings(torch.LongTensor(neg_v))
        neg_score = torch.mul(neg_emb_u, neg_emb_v)
        neg_score = F.logsigmoid(-1 * torch.sum(neg_score, dim=1))
        losses.append(sum(neg_score))
        return -1 * sum(losses)


class CBOWFixed(CBOW):
    def forward(self, pos_u, pos_v, neg_u, neg_v):
        emb_u = torch.stack([self.u_embeddings(torch.LongTensor(w)).sum(dim=0) for w in pos_u])
        score = F.logsigmoid(torch.sum(emb_u * self.v_embeddings(torch.LongTensor(pos_v)), dim=1))
        neg_emb_u = torch.stack([self.u_embeddings(torch.LongTensor(w)).sum(dim=0) for w in neg_u])
        neg_emb_v = self.v_embeddings(torch.LongTensor(neg_v))
        neg_score = F.logsigmoid(-1 * torch.sum(neg_emb_u * neg_emb_v, dim=1))
        return -1 * (sum(score) + sum(neg_score))


def train_step(model_cls, batch, lr=0.2):
    torch.manual_seed(0)
    model = model_cls(6, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.zero_grad()
    loss = model.forward(*batch)
    loss.backward()
    grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]
    optimizer.step()
    return grads


if __name__ == "__main__":
    pos_u = [[0, 1, 3, 4], [1, 2, 4, 5]]
    pos_v = [2, 3]
    neg_u = [[0, 1, 3, 4], [0, 1, 3, 4], [1, 2, 4, 5]]
    neg_v = [7, 9, 10]
    batch = (pos_u, pos_v, neg_u, neg_v)
    g_bug, g_fix = train_step(CBOW, batch), train_step(CBOWFixed, batch)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
