# Source: https://github.com/CSCYQJ/MICCAI23-ProtoContra-SFDA/issues/18
# Title: "Implementation bug? It seems like the last layer is not frozen?"
# Thread: source-free domain adaptation freezes the segmentation network's last layer with
# `self.model.outc.requires_grad = False`; `outc` is an nn.Module, so this only sets a Python
# attribute and the layer's parameters keep requires_grad=True and keep receiving gradients (and
# updates). The reporter compared weights before/after adaptation; a second user confirmed and fixed
# it by passing only the trainable parameters to the optimizer / freezing the parameters themselves.
# Kept: a trainer that freezes `model.outc` via the module attribute before adaptation, a U-Net-like
# model with an `outc` head, and the adaptation step. Added: the tiny model, an entropy-minimisation
# adaptation loss, and the comparison with freezing the parameters.
import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyUNet(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.inc = nn.Conv2d(1, 8, 3, padding=1)
        self.down = nn.Conv2d(8, 8, 3, padding=1, stride=2)
        self.up = nn.ConvTranspose2d(8, 8, 2, stride=2)
        self.outc = nn.Conv2d(16, classes, 1)

    def forward(self, x):
        x1 = F.relu(self.inc(x))
        x2 = F.relu(self.down(x1))
        return self.outc(torch.cat([x1, self.up(x2)], dim=1))


class SFDATrainer:
    def __init__(self, model):
        self.model = model
        self.freeze_head()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)

    def freeze_head(self):
        self.model.outc.requires_grad = False

    def adapt_grads(self, images):
        self.optimizer.zero_grad()
        prob = self.model(images).softmax(dim=1)
        entropy = -(prob * prob.clamp_min(1e-6).log()).sum(dim=1).mean()
        entropy.backward()
        return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in self.model.parameters()]


class SFDATrainerFixed(SFDATrainer):
    def freeze_head(self):
        for p in self.model.outc.parameters():
            p.requires_grad = False


if __name__ == "__main__":
    torch.manual_seed(0)
    images = torch.randn(2, 1, 8, 8)
    buggy = TinyUNet()
    fixed = TinyUNet()
    fixed.load_state_dict(buggy.state_dict())
    g_bug = SFDATrainer(buggy).adapt_grads(images)
    g_fix = SFDATrainerFixed(fixed).adapt_grads(images)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
