# Source: https://github.com/ligerlac/torchlogix/pull/17
# Title: "export mode forward pass of conv layer passes tests now"
# Diagnosis from the thread (maintainer's review): the convolutional logic-gate layer's forward turned torch
# tensors into numpy arrays (to gather the receptive fields) and back; that silently cuts the computational
# graph, so every layer before it stops receiving gradients, with no error. The gathering must stay in torch.
# Kept from the thread: a difflogic-style stack (logic-gate conv layer with learnable gate logits over the 16
# two-input gates, a second logic layer, group-sum head), receptive-field indices drawn once at init, the numpy
# round trip inside forward. Added: sizes, the tiny binary-image batch, the comparison with the torch-only fix.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def bin_op_s(a, b, w):
    # expectation of the 16 two-input boolean functions under softmax weights w (..., 16)
    ops = [torch.zeros_like(a), a * b, a - a * b, a, b - a * b, b, a + b - 2 * a * b, a + b - a * b,
           1 - (a + b - a * b), 1 - (a + b - 2 * a * b), 1 - b, 1 - b + a * b, 1 - a, 1 - a + a * b,
           1 - a * b, torch.ones_like(a)]
    return sum(w[..., i] * op for i, op in enumerate(ops))


class LogicConv2d(nn.Module):
    def __init__(self, in_ch, out_ch, receptive=3, numpy_gather=True, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.idx_a = rng.integers(0, in_ch * receptive * receptive, size=out_ch)
        self.idx_b = rng.integers(0, in_ch * receptive * receptive, size=out_ch)
        self.receptive = receptive
        self.numpy_gather = numpy_gather
        self.weights = nn.Parameter(torch.randn(out_ch, 16))

    def forward(self, x):
        b, c, h, w = x.shape
        patches = F.unfold(x, self.receptive, padding=1)  # (b, c*k*k, h*w)
        if self.numpy_gather:
            p = patches.detach().cpu().numpy()
            a = torch.from_numpy(np.take(p, self.idx_a, axis=1))
            bb = torch.from_numpy(np.take(p, self.idx_b, axis=1))
        else:
            a = patches[:, torch.as_tensor(self.idx_a)]
            bb = patches[:, torch.as_tensor(self.idx_b)]
        wts = F.softmax(self.weights, dim=-1)[None, :, None, :]
        out = bin_op_s(a, bb, wts)
        return out.view(b, -1, h, w)


class LogicNet(nn.Module):
    def __init__(self, numpy_gather):
        super().__init__()
        self.conv1 = LogicConv2d(1, 8, numpy_gather=False, seed=1)
        self.conv2 = LogicConv2d(8, 8, numpy_gather=numpy_gather, seed=2)
        self.k = 4

    def forward(self, x):
        x = self.conv2(self.conv1(x))
        x = x.flatten(2).mean(-1)
        return x.view(x.shape[0], self.k, -1).sum(-1)  # group sum -> 4 classes


def grads(numpy_gather):
    torch.manual_seed(0)
    model = LogicNet(numpy_gather)
    x = (torch.rand(3, 1, 6, 6) > 0.5).float()
    y = torch.tensor([0, 2, 3])
    F.cross_entropy(model(x), y).backward()
    return [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


if __name__ == "__main__":
    buggy, fixed = grads(numpy_gather=True), grads(numpy_gather=False)
    same = all(torch.allclose(a, b) for a, b in zip(buggy, fixed))
    print("gradguard-case: gradients differ from the fix" if not same else "gradients match")
