"""An inplace ReLU applied after a sigmoid gate, which saved its output (GG005)."""

import torch
import torch.nn as nn


class Gate(nn.Module):
    def __init__(self, dim: int = 16):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        gate = torch.sigmoid(self.proj(x))
        return self.act(gate)


if __name__ == "__main__":
    Gate()(torch.randn(4, 16)).sum().backward()
