# Source: https://github.com/catalyst-team/catalyst/issues/79
# Title: "[solved] ResnetEncoder 'frozen' argument doesn't work"
# Thread: ResnetEncoder(frozen=True) was meant to make the backbone untrainable, but it set
# `requires_grad = False` on the nn.Module, which has no such flag for its parameters, so the backbone
# still trained (the reporter showed a weight changing after one optimizer step). The fix (catalyst
# PR #81) loops over the module's parameters and sets requires_grad=False on each.
# Kept: an encoder class with `arch`, `pooling` and `frozen` options whose constructor "freezes" the
# feature net through the module attribute, a Net(encoder + linear logits) and one BCE training step.
# Added: a @dataclass holding the encoder options (the config object passed around), a tiny conv
# feature net instead of a torchvision ResNet, and the gradient comparison with the fixed encoder.
from dataclasses import dataclass

import torch
import torch.nn as nn


@dataclass
class EncoderConfig:
    arch: str = "tiny-resnet"
    pooling: str = "GlobalAvgPool2d"
    frozen: bool = True
    out_features: int = 8


class ResnetEncoder(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.cfg = cfg
        self.feature_net = nn.Sequential(
            nn.Conv2d(3, cfg.out_features, 3, padding=1),
            nn.BatchNorm2d(cfg.out_features),
            nn.ReLU(),
        )
        self.out_features = cfg.out_features
        if cfg.frozen:
            self.freeze()

    def freeze(self):
        self.feature_net.requires_grad = False

    def forward(self, x):
        return self.feature_net(x).mean(dim=(2, 3))


class ResnetEncoderFixed(ResnetEncoder):
    def freeze(self):
        for param in self.feature_net.parameters():
            param.requires_grad = False


class Net(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.enc = encoder
        self.logits = nn.Linear(encoder.out_features, 1)

    def forward(self, x):
        return self.logits(self.enc(x))


def backbone_grads(model, inputs, targets):
    optimizer = torch.optim.Adam(model.parameters())
    optimizer.zero_grad()
    nn.BCEWithLogitsLoss()(model(inputs), targets).backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.enc.parameters()]


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = EncoderConfig()
    buggy = Net(ResnetEncoder(cfg))
    fixed = Net(ResnetEncoderFixed(cfg))
    fixed.load_state_dict(buggy.state_dict())
    inputs, targets = torch.randn(4, 3, 8, 8), torch.ones(4, 1)
    g_bug = backbone_grads(buggy, inputs, targets)
    g_fix = backbone_grads(fixed, inputs, targets)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
