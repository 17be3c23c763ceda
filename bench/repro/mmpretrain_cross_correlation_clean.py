"""mmpretrain 1.2.0, mmpretrain/models/losses/cross_correlation_loss.py:35 (gradguard GG001, warning): FALSE, shown clean.

BarlowTwins' `CrossCorrelationLoss.forward` does
    on_diag = torch.diagonal(c).add_(-1).pow_(2).sum()
    off_diag = self.off_diagonal(c).pow_(2).sum()
with `off_diagonal(x) = x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()`.  gradguard says the
second `.pow_()` modifies `c`.  It does not: `[:, 1:]` is non-contiguous, so the final `.flatten()`
copies, and `pow_` writes that copy.  The loss trains and its gradient equals the out-of-place
formula's (checked below, against ((diag - 1)**2).sum() + lambd * (offdiag**2).sum()).

mmpretrain does not import without mmcv's compiled ops; `forward` and `off_diagonal` are copied
faithfully from cross_correlation_loss.py:22-44.

    python bench/repro/mmpretrain_cross_correlation_clean.py     # exits 0 when clean
"""

import torch


def off_diagonal(x: torch.Tensor) -> torch.Tensor:  # cross_correlation_loss.py:39
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


def cross_correlation_loss(cross_correlation_matrix: torch.Tensor, lambd: float = 0.0051) -> torch.Tensor:
    on_diag = torch.diagonal(cross_correlation_matrix).add_(-1).pow_(2).sum()
    off_diag = off_diagonal(cross_correlation_matrix).pow_(2).sum()  # line 35
    loss = on_diag + lambd * off_diag
    return loss


torch.manual_seed(0)
projector = torch.nn.Linear(5, 6)
x1, x2 = torch.randn(8, 5), torch.randn(8, 5)


def cross_correlation():  # BarlowTwins: batch-normalised embeddings, c = z1.T @ z2 / N
    z1, z2 = projector(x1), projector(x2)
    z1 = (z1 - z1.mean(0)) / z1.std(0)
    z2 = (z2 - z2.mean(0)) / z2.std(0)
    return z1.T @ z2 / 8


cross_correlation_loss(cross_correlation()).backward()
grad = projector.weight.grad.clone()
projector.weight.grad = None
c = cross_correlation()
off = ~torch.eye(6, dtype=torch.bool)
(((torch.diagonal(c) - 1) ** 2).sum() + 0.0051 * (c[off] ** 2).sum()).backward()
assert torch.allclose(grad, projector.weight.grad), (grad - projector.weight.grad).abs().max()
print("mmpretrain's loss: backward ok, gradient equals the out-of-place formula's")
