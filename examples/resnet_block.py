"""Correct code that looks risky: nothing here is flagged (BatchNorm does not save its output)."""

import torch
import torch.nn as nn


class BasicBlock(nn.Module):
    def __init__(self, channels: int = 8):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        identity = x
        out = self.bn(self.conv(x))
        out += identity
        return self.relu(out)


def sgd_step(model: nn.Module, lr: float = 0.1) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad


if __name__ == "__main__":
    block = BasicBlock()
    block(torch.randn(2, 8, 6, 6)).sum().backward()
    sgd_step(block)
