"""A hand-written SGD step without torch.no_grad(): parameters are leaves that require grad (GG002)."""

import torch
import torch.nn as nn


def train(steps: int = 3, lr: float = 0.1):
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    for _ in range(steps):
        x = torch.randn(16, 8)
        loss = model(x).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            p -= lr * p.grad
    return model


if __name__ == "__main__":
    train()
