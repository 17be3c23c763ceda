"""Scaling q after chunk() modifies one of several views of qkv in place (GG004)."""

import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.scale = dim ** -0.5

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q *= self.scale
        attn = (q @ k.transpose(-2, -1)).softmax(dim=-1)
        return attn @ v


if __name__ == "__main__":
    Attention()(torch.randn(2, 5, 16)).sum().backward()
