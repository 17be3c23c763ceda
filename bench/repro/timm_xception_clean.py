"""timm 1.0.31, timm/models/xception.py:97 (GG005) and :119 (GG001), errors: FALSE, shown clean.

`Block.__init__` builds `rep` as [ReLU(inplace=True), SeparableConv2d, BatchNorm2d] * reps, then either
drops the first ReLU (`rep = rep[1:]` when not start_with_relu) or replaces it
(`rep[0] = nn.ReLU(inplace=False)`), so the module first applied to the block's input (the stem's
`act2` ReLU output, or the previous block's output) is never in place; the later in-place ReLUs act on
BatchNorm2d outputs, which BatchNorm does not save.  `x += skip` writes the rep's output (a BatchNorm2d
or MaxPool2d output, saved by nothing).  Reported by the analysis in the working tree of 2026-11-27
~22:10 UTC (not by commit cb16c1c); the legacy Xception trains.  timm is not installed (it needs
torchvision), so `SeparableConv2d`, `Block` and `Xception.__init__`/`forward_features` are copied faithfully
from xception.py (device/dtype arguments dropped; block1..block12 held in one nn.Sequential, called in
the same order), with timm's real channel widths.

    python bench/repro/timm_xception_clean.py     # exits 0 when clean
"""

import torch
import torch.nn as nn


class SeparableConv2d(nn.Module):  # xception.py:34
    def __init__(self, in_channels, out_channels, kernel_size=1, stride=1, padding=0, dilation=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, in_channels, kernel_size, stride, padding, dilation,
                               groups=in_channels, bias=False)
        self.pointwise = nn.Conv2d(in_channels, out_channels, 1, 1, 0, 1, 1, bias=False)

    def forward(self, x):
        x = self.conv1(x)
        x = self.pointwise(x)
        return x


class Block(nn.Module):  # xception.py:68
    def __init__(self, in_channels, out_channels, reps, strides=1, start_with_relu=True, grow_first=True):
        super().__init__()
        if out_channels != in_channels or strides != 1:
            self.skip = nn.Conv2d(in_channels, out_channels, 1, stride=strides, bias=False)
            self.skipbn = nn.BatchNorm2d(out_channels)
        else:
            self.skip = None
        rep = []
        for i in range(reps):
            if grow_first:
                inc = in_channels if i == 0 else out_channels
                outc = out_channels
            else:
                inc = in_channels
                outc = in_channels if i < (reps - 1) else out_channels
            rep.append(nn.ReLU(inplace=True))  # line 97
            rep.append(SeparableConv2d(inc, outc, 3, stride=1, padding=1))
            rep.append(nn.BatchNorm2d(outc))
        if not start_with_relu:
            rep = rep[1:]
        else:
            rep[0] = nn.ReLU(inplace=False)
        if strides != 1:
            rep.append(nn.MaxPool2d(3, strides, 1))
        self.rep = nn.Sequential(*rep)

    def forward(self, inp):
        x = self.rep(inp)
        if self.skip is not None:
            skip = self.skip(inp)
            skip = self.skipbn(skip)
        else:
            skip = inp
        x += skip  # line 119
        return x


class Xception(nn.Module):  # xception.py:125, features only
    def __init__(self, in_chans=3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_chans, 32, 3, 2, 0, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.act1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(32, 64, 3, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.act2 = nn.ReLU(inplace=True)
        self.blocks = nn.Sequential(
            Block(64, 128, 2, 2, start_with_relu=False), Block(128, 256, 2, 2), Block(256, 728, 2, 2),
            *[Block(728, 728, 3, 1) for _ in range(8)], Block(728, 1024, 2, 2, grow_first=False))
        self.conv3 = SeparableConv2d(1024, 1536, 3, 1, 1)
        self.bn3 = nn.BatchNorm2d(1536)
        self.act3 = nn.ReLU(inplace=True)
        self.conv4 = SeparableConv2d(1536, 2048, 3, 1, 1)
        self.bn4 = nn.BatchNorm2d(2048)
        self.act4 = nn.ReLU(inplace=True)

    def forward_features(self, x):
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.act2(self.bn2(self.conv2(x)))  # line 342: relu saves its output, block1's input
        x = self.blocks(x)
        x = self.act3(self.bn3(self.conv3(x)))
        x = self.act4(self.bn4(self.conv4(x)))
        return x


torch.manual_seed(0)
model = Xception()
model.forward_features(torch.randn(2, 3, 64, 64)).mean().backward()
assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
print("Xception (timm's block structure and widths): backward ok, every parameter has a finite gradient")
