"""A pre-norm transformer block whose residual is added in place (GG001)."""

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Linear(dim, dim)

    def forward(self, x):
        # LayerNorm and Linear save their input x for backward; += overwrites it.
        x += self.ff(self.norm(x))
        return x


if __name__ == "__main__":
    block = Block()
    x = torch.randn(4, 16, requires_grad=True)
    block(x * 1.0).sum().backward()
