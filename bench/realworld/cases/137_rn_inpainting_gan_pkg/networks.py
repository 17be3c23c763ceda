# Part of case 137 (see main.py for the thread and diagnosis): generator with a region normalization (the
# masked and the known region of each feature map normalised separately) and a patch discriminator.
import torch
import torch.nn as nn
import torch.nn.functional as F


class RegionNorm(nn.Module):
    def __init__(self, channels, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.beta = nn.Parameter(torch.zeros(1, channels, 1, 1))

    def _region(self, x, region):
        n = region.sum(dim=(2, 3), keepdim=True).clamp(min=1.0)
        mean = (x * region).sum(dim=(2, 3), keepdim=True) / n
        var = (((x - mean) * region) ** 2).sum(dim=(2, 3), keepdim=True) / n
        return (x - mean) / torch.sqrt(var + self.eps) * region

    def forward(self, x, mask):
        mask = F.interpolate(mask, size=x.shape[-2:], mode="nearest")
        out = self._region(x, mask) + self._region(x, 1 - mask)
        return out * self.gamma + self.beta


class G_Net(nn.Module):
    def __init__(self, input_channels=3, width=16):
        super().__init__()
        self.enc = nn.Conv2d(input_channels + 1, width, 3, padding=1)
        self.rn = RegionNorm(width)
        self.mid = nn.Conv2d(width, width, 3, padding=1)
        self.dec = nn.Conv2d(width, input_channels, 3, padding=1)

    def forward(self, gt, mask):
        x = torch.cat([gt * (1 - mask), mask], dim=1)
        x = F.relu(self.rn(self.enc(x), mask))
        x = F.relu(self.mid(x))
        return torch.sigmoid(self.dec(x))


class D_Net(nn.Module):
    def __init__(self, in_channels=3, use_sigmoid=True, width=16):
        super().__init__()
        self.use_sigmoid = use_sigmoid
        self.conv1 = nn.Conv2d(in_channels, width, 4, stride=2, padding=1)
        self.conv2 = nn.Conv2d(width, 1, 4, stride=2, padding=1)

    def forward(self, x):
        feat = F.leaky_relu(self.conv1(x), 0.2)
        out = self.conv2(feat)
        return (torch.sigmoid(out) if self.use_sigmoid else out), [feat]
