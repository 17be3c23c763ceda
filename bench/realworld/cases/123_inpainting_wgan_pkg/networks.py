# Case 123, networks: a coarse-to-fine inpainting generator and the local/global critics (see main.py for the thread).
import torch
import torch.nn as nn
import torch.nn.functional as F


def gen_conv(in_ch, out_ch):
    return nn.Sequential(nn.Conv2d(in_ch, out_ch, 3, 1, 1), nn.ELU())


class Generator(nn.Module):
    def __init__(self, cnum=4):
        super().__init__()
        self.coarse = nn.Sequential(gen_conv(5, cnum), nn.Conv2d(cnum, 3, 3, 1, 1))
        self.fine = nn.Sequential(gen_conv(5, cnum), nn.Conv2d(cnum, 3, 3, 1, 1))

    def forward(self, x, mask):
        ones = torch.ones_like(mask)
        x1 = torch.clamp(self.coarse(torch.cat([x, ones, mask], dim=1)), -1.0, 1.0)
        x1_inpaint = x1 * mask + x * (1.0 - mask)
        x2 = torch.clamp(self.fine(torch.cat([x1_inpaint, ones, mask], dim=1)), -1.0, 1.0)
        return x1, x2, None


class DisConvModule(nn.Module):
    def __init__(self, cnum=4):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(3, cnum, 4, 2, 1), nn.LeakyReLU(0.2))

    def forward(self, x):
        return self.conv(x)


class LocalDis(nn.Module):
    def __init__(self, patch=8, cnum=4):
        super().__init__()
        self.dis_conv_module = DisConvModule(cnum)
        self.linear = nn.Linear(cnum * (patch // 2) ** 2, 1)

    def forward(self, x):
        x = self.dis_conv_module(x)
        return self.linear(x.view(x.size(0), -1))


class GlobalDis(LocalDis):
    def __init__(self, size=16, cnum=4):
        super().__init__(patch=size, cnum=cnum)


def l1(a, b):
    return F.l1_loss(a, b)
