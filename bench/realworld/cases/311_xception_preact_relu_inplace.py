# Source: https://github.com/osmr/imgclsmob/issues/13
# Title: "Inplace ReLU's are unnecessary and wrong"
# Thread: the model zoo builds activations as `self.activ = nn.ReLU(inplace=True)` and applies them as
# `x = self.activ(x)`, which rewrites the old `x` as well as producing the new one; training Xception
# then fails at loss.backward() with "one of the variables needed for gradient computation has been
# modified by an inplace operation". Removing `inplace=True` fixes it (the maintainer labelled it a bug).
# Kept: Xception's block layout: a skip branch (1x1 strided conv) on the block input and a body whose
# first unit is a pre-activation ReLU (inplace=True) followed by a separable convolution, summed at
# the end. Added: two tiny blocks, a stem/classifier and the training-step driver.
import torch
import torch.nn as nn
import torch.nn.functional as F


class DwsConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.dw = nn.Conv2d(in_channels, in_channels, 3, padding=1, groups=in_channels, bias=False)
        self.pw = nn.Conv2d(in_channels, out_channels, 1, bias=False)

    def forward(self, x):
        return self.pw(self.dw(x))


class DwsConvBlock(nn.Module):
    """Pre-activation: ReLU -> depthwise separable conv -> BN."""

    def __init__(self, in_channels, out_channels, activate=True):
        super().__init__()
        self.activate = activate
        if self.activate:
            self.activ = nn.ReLU(inplace=True)
        self.conv = DwsConv(in_channels, out_channels)
        self.bn = nn.BatchNorm2d(out_channels)

    def forward(self, x):
        if self.activate:
            x = self.activ(x)
        return self.bn(self.conv(x))


class XceptionUnit(nn.Module):
    def __init__(self, in_channels, out_channels, stride=2):
        super().__init__()
        self.identity_conv = nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)
        self.identity_bn = nn.BatchNorm2d(out_channels)
        self.body = nn.Sequential(
            DwsConvBlock(in_channels, out_channels),
            DwsConvBlock(out_channels, out_channels),
            nn.MaxPool2d(3, stride=stride, padding=1),
        )

    def forward(self, x):
        identity = self.identity_bn(self.identity_conv(x))
        x = self.body(x)
        return x + identity


class TinyXception(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8))
        self.unit1 = XceptionUnit(8, 16)
        self.unit2 = XceptionUnit(16, 16)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.unit2(self.unit1(self.stem(x)))
        return self.fc(x.mean(dim=(2, 3)))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyXception()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    images, labels = torch.randn(2, 3, 8, 8), torch.tensor([1, 3])
    optimizer.zero_grad()
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    optimizer.step()
