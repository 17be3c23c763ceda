"""Masking a column of exp() output in place: exp saved its output for backward (GG001)."""

import torch
import torch.nn as nn


def score(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    probs = torch.exp(model(x))
    probs[:, 0] = 0.0
    loss = probs.sum()
    loss.backward()
    return loss


if __name__ == "__main__":
    score(nn.Linear(8, 4), torch.randn(16, 8))
