# Source: https://github.com/neuralmagic/sparseml/pull/94
# Title: "update yolo initialize fn for torch 1.8"
# Diagnosis from the thread: YOLOv3/v5's "smart bias initialization" views each detection conv's bias as
# (anchors, -1) and adds the objectness / class priors in place (`b[:, 4] += math.log(8 / 640 ** 2)`); since
# torch 1.8 an in-place op through a view of a leaf parameter raises. The PR detaches the view before editing
# and then rebinds the conv bias to a new Parameter ("detach is ok since we overwrite this parameter with a new
# one that requires grad"). Kept from the thread: the Detect head (per-level 1x1 convs, na anchors, no outputs
# per anchor), the Model's _initialize_biases loop over (detect.m, detect.stride) with the two in-place prior
# updates. Added: a toy backbone, sizes, two strides, the driver.
import math

import torch
import torch.nn as nn


class Detect(nn.Module):
    def __init__(self, nc=3, anchors=((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119)), ch=(8, 16)):
        super().__init__()
        self.nc = nc
        self.no = nc + 5
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        self.stride = torch.tensor([8.0, 16.0])
        self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)

    def forward(self, xs):
        out = []
        for i in range(self.nl):
            bs, _, ny, nx = xs[i].shape
            out.append(self.m[i](xs[i]).view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2))
        return out


class Model(nn.Module):
    def __init__(self, nc=3):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.SiLU(), nn.Conv2d(8, 8, 3, 2, 1), nn.SiLU(),
                                  nn.Conv2d(8, 8, 3, 2, 1), nn.SiLU())
        self.down = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.SiLU())
        self.detect = Detect(nc)
        self._initialize_biases()

    def _initialize_biases(self, cf=None):
        # smart bias initialization (https://arxiv.org/abs/1708.02002 section 3.3)
        m = self.detect
        for mi, s in zip(m.m, m.stride):
            b = mi.bias.view(m.na, -1)
            b[:, 4] += math.log(8 / (640 / s) ** 2)  # obj (8 objects per 640 image)
            b[:, 5:] += math.log(0.6 / (m.nc - 0.99)) if cf is None else torch.log(cf / cf.sum())  # cls
            mi.bias = torch.nn.Parameter(b.view(-1), requires_grad=True)

    def forward(self, x):
        p3 = self.stem(x)
        p4 = self.down(p3)
        return self.detect([p3, p4])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Model(nc=3)
    imgs = torch.randn(2, 3, 64, 64)
    preds = model(imgs)
    loss = sum(p[..., 4].sigmoid().mean() for p in preds)
    loss.backward()
    print("ok")
