# Thread: https://github.com/NX-AI/xlstm/issues/51
# Title: "Bug Report: In-Place Operation Causes Gradient Error in conv1d_step Function"
# Diagnosis from the thread: running the xLSTM block step by step (the recurrent mode, one token at a time)
# and backpropagating fails with "... which is output 0 of torch::autograd::CopySlices, is at version 38;
# expected version 36". conv1d_step shifts the causal-conv state in place (`conv_state.copy_(torch.roll(...))`)
# and writes the new token into its last row (`conv_state[:, -1:, :] = x`), but the previous step's
# `conv_state * conv1d_weight` saved conv_state for the weight's gradient. The reporter's fix (and PR #82): build
# a new state instead, torch.cat of the rolled-out rows and x, so the graph through time is kept.
# Kept: CausalConv1dConfig (a dataclass), conv1d_step with its shape asserts and the state it returns, the
# CausalConv1d layer whose step() passes its conv weight as (KS, D) and its bias, an mLSTM-style block that runs
# the conv, a SiLU and a gated recurrent cell per step, carrying (conv_state, h). Added: sizes, the gated cell, a
# training loop over one random sequence scored on every step, one AdamW step.
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


@dataclass
class CausalConv1dConfig:
    feature_dim: int = None
    kernel_size: int = 4
    causal_conv_bias: bool = True
    conv1d_kwargs: dict = field(default_factory=dict)

    def __post_init__(self):
        assert self.kernel_size >= 0, "kernel_size must be >= 0"


def conv1d_step(x, conv_state, conv1d_weight, conv1d_bias=None):
    """x: (B, 1, D), conv_state: (B, KS, D), conv1d_weight: (KS, D)."""
    assert x.shape[0] == conv_state.shape[0], "batch sizes differ"
    assert x.shape[2] == conv_state.shape[2], "feature dimensions differ"
    assert x.shape[1] == 1, f"x has sequence length {x.shape[1]} but it should be 1"
    conv_state.copy_(torch.roll(conv_state, shifts=-1, dims=1))
    conv_state[:, -1:, :] = x
    y = torch.sum(conv_state * conv1d_weight, dim=1, keepdim=True)
    if conv1d_bias is not None:
        y += conv1d_bias
    return y, conv_state


class CausalConv1d(nn.Module):
    def __init__(self, config: CausalConv1dConfig):
        super().__init__()
        self.config = config
        self.conv = nn.Conv1d(config.feature_dim, config.feature_dim, config.kernel_size,
                              padding=config.kernel_size - 1, groups=config.feature_dim,
                              bias=config.causal_conv_bias, **config.conv1d_kwargs)

    def empty_state(self, batch_size):
        return torch.zeros(batch_size, self.config.kernel_size, self.config.feature_dim)

    def forward(self, x):  # (B, S, D), the whole sequence at once
        y = self.conv(x.transpose(1, 2))[..., : x.shape[1]]
        return y.transpose(1, 2)

    def step(self, x, conv_state):
        return conv1d_step(x, conv_state, self.conv.weight[:, 0, :].transpose(0, 1), self.conv.bias)


class MLSTMStepBlock(nn.Module):
    def __init__(self, dim, kernel_size=4):
        super().__init__()
        self.proj_up = nn.Linear(dim, 2 * dim)
        self.conv1d = CausalConv1d(CausalConv1dConfig(feature_dim=dim, kernel_size=kernel_size))
        self.gates = nn.Linear(2 * dim, 2 * dim)
        self.proj_down = nn.Linear(dim, dim)

    def step(self, x, state):
        conv_state, h = state
        x_inner, z = self.proj_up(x).chunk(2, dim=-1)
        conv_out, conv_state = self.conv1d.step(x_inner, conv_state)
        conv_act = F.silu(conv_out)
        i, f = torch.sigmoid(self.gates(torch.cat([conv_act, h], dim=-1))).chunk(2, dim=-1)
        h = f * h + i * torch.tanh(conv_act)
        return self.proj_down(h * F.silu(z)) + x, (conv_state, h)


if __name__ == "__main__":
    B, S, D = 2, 6, 8
    block = MLSTMStepBlock(D)
    optimizer = torch.optim.AdamW(block.parameters(), lr=1e-3)
    seq, target = torch.randn(B, S, D), torch.randn(B, S, D)
    state = (block.conv1d.empty_state(B), torch.zeros(B, 1, D))
    loss = 0.0
    for t in range(S):
        y, state = block.step(seq[:, t:t + 1], state)
        loss = loss + F.mse_loss(y, target[:, t:t + 1])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
