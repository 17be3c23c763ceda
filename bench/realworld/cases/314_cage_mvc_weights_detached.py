# Source: https://github.com/yifita/deep_cage/issues/16
# Title: "Why use weights = weights.detach() on line 137 of the file common.py?"
# Thread: the cage-deformation helper detaches the mean-value-coordinate weights it returns
# (`weights = weights.detach()`), yet the training loss adds a regulariser on those weights
# (`loss["WREG"] += mvc_reg_loss(outputs["weight"]) * mvc_weight`). The regulariser therefore has no
# effect whatever its weight; the author confirmed the line was added later out of context and
# removed it.
# Kept: a deform helper returning (deformed points, weights) that detaches the weights, a network
# predicting cage offsets, and a loss dict with a Chamfer-like shape term plus the WREG term.
# Added: softmax-of-distance weights standing in for MVC, tiny point clouds, and the comparison with
# the helper without the detach.
import torch
import torch.nn as nn


def deform_with_mvc(cage, new_cage, points, tau=0.5):
    dist = torch.cdist(points, cage)
    weights = torch.softmax(-dist / tau, dim=-1)
    weights = weights.detach()
    deformed = weights @ new_cage
    return deformed, weights


def deform_with_mvc_fixed(cage, new_cage, points, tau=0.5):
    dist = torch.cdist(points, cage)
    weights = torch.softmax(-dist / tau, dim=-1)
    deformed = weights @ new_cage
    return deformed, weights


class CageNet(nn.Module):
    def __init__(self, n_cage=6):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 16))
        self.cage_offset = nn.Linear(16, n_cage * 3)
        self.template = nn.Parameter(torch.randn(n_cage, 3))
        self.n_cage = n_cage

    def forward(self, source, target, deform_fn):
        code = self.encoder(target).max(dim=0).values
        cage = self.template
        new_cage = cage + self.cage_offset(code).view(self.n_cage, 3)
        deformed, weights = deform_fn(cage, new_cage, source)
        return {"deformed": deformed, "weight": weights, "cage": cage}


def mvc_reg_loss(weights):
    return (weights.clamp(max=0.0) ** 2).sum() + weights.var(dim=-1).mean()


def compute_losses(outputs, target, mvc_weight=0.5):
    loss = {}
    d = torch.cdist(outputs["deformed"], target)
    loss["CD"] = d.min(dim=1).values.mean() + d.min(dim=0).values.mean()
    loss["WREG"] = mvc_reg_loss(outputs["weight"]) * mvc_weight
    return sum(loss.values())


def grads(model, deform_fn, source, target):
    model.zero_grad()
    compute_losses(model(source, target, deform_fn), target).backward()
    return [p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    torch.manual_seed(0)
    source, target = torch.randn(20, 3), torch.randn(20, 3)
    model = CageNet()
    g_bug = grads(model, deform_with_mvc, source, target)
    g_fix = grads(model, deform_with_mvc_fixed, source, target)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
