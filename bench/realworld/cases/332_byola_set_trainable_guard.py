# Source: https://github.com/nttcslab/byol-a/issues/7
# Title: "Model parameters cannot be trainable once they become requires_grad=False"
# Thread: the network mix-in's `set_trainable(trainable)` only touches parameters that currently
# require grad (`if p.requires_grad: p.requires_grad = trainable`), so after the encoder was frozen
# with set_trainable(False) a later set_trainable(True) changes nothing and the encoder silently stays
# frozen. The author's fix: remove the `if p.requires_grad` guard.
# Kept: the NetworkCommonMixIn with load_weight()/set_trainable(), the AudioNTT2020 conv encoder with
# max+mean pooling over time. Added: a smaller encoder, a downstream classifier head, the
# freeze-then-unfreeze schedule (linear probe then fine-tuning) and the gradient comparison.
import torch
import torch.nn as nn
import torch.nn.functional as F


class NetworkCommonMixIn:
    def set_trainable(self, trainable=False):
        for p in self.parameters():
            if p.requires_grad:
                p.requires_grad = trainable


class NetworkCommonMixInFixed:
    def set_trainable(self, trainable=False):
        for p in self.parameters():
            p.requires_grad = trainable


def make_encoder(mixin, n_mels=8, d=16):
    class AudioNTT2020(nn.Module, mixin):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(1, 4, 3, stride=1, padding=1),
                nn.BatchNorm2d(4),
                nn.ReLU(),
                nn.MaxPool2d(2, stride=2),
            )
            self.fc = nn.Sequential(nn.Linear(4 * (n_mels // 2), d), nn.ReLU())
            self.d = d

        def forward(self, x):
            x = self.features(x)
            x = x.permute(0, 3, 2, 1)
            B, T, D, C = x.shape
            x = self.fc(x.reshape((B, T, C * D)))
            (x1, _) = torch.max(x, dim=1)
            return x1 + torch.mean(x, dim=1)

    return AudioNTT2020()


def finetune_grads(mixin, specs, labels):
    torch.manual_seed(0)
    encoder = make_encoder(mixin)
    head = nn.Linear(encoder.d, 3)
    encoder.set_trainable(False)  # stage 1: linear probe on frozen features
    F.cross_entropy(head(encoder(specs)), labels).backward()
    head.zero_grad()
    encoder.set_trainable(True)  # stage 2: fine-tune everything
    F.cross_entropy(head(encoder(specs)), labels).backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in encoder.parameters()]


if __name__ == "__main__":
    torch.manual_seed(0)
    specs, labels = torch.randn(4, 1, 8, 6), torch.tensor([0, 1, 2, 0])
    g_bug = finetune_grads(NetworkCommonMixIn, specs, labels)
    g_fix = finetune_grads(NetworkCommonMixInFixed, specs, labels)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
