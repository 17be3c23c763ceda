# Thread: https://github.com/Jee-King/TSAN/issues/3
# Title: "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace
#         operation"
# Diagnosis from the thread: training the TSAN super-resolution network fails with the in-place error; the
# reporter's fix is one line in Train/model/tsan.py (line 103): `out = x` -> `out = x.clone()`. In the
# cross-space block (CSB) the four quadrants of x are stacked on channels, mixed by a 1x1 conv and written back
# by slice assignment into `out`, which is only another name for x - the block's input, which the parallel
# dense-residual branch of the same MCAB (and the quadrant slicing itself) already used and saved.
# Kept: MCAB = dense residual branch (DRB) on x and CSB on x followed by first/second-order attention and a
# sigmoid gate, multiplied; CSB's quadrant split, torch.cat, 1x1 conv and four slice writes into out = x.
# Added: a shallow DRB (two dilated 3x3 convs), sizes, a random low-resolution batch, an L1 loss, one step.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class DRB(nn.Module):
    def __init__(self, n_feats):
        super().__init__()
        self.conv_a = nn.Conv2d(n_feats, n_feats, 3, padding=1)
        self.conv_b = nn.Conv2d(n_feats, n_feats, 3, padding=2, dilation=2)
        self.conv_1x1 = nn.Conv2d(2 * n_feats, n_feats, 1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        a = self.relu(self.conv_a(x))
        b = self.relu(self.conv_b(a))
        return x + self.conv_1x1(torch.cat([a, b], 1))


class CSB(nn.Module):
    def __init__(self, n_feats):
        super().__init__()
        self.conv1 = nn.Conv2d(n_feats * 4, n_feats * 4, kernel_size=1, padding=0, bias=False)

    def forward(self, x):
        h2, w2 = x.size(2) // 2, x.size(3) // 2
        f1, f2 = x[:, :, 0:h2, 0:w2], x[:, :, h2:, 0:w2]
        f3, f4 = x[:, :, 0:h2, w2:], x[:, :, h2:, w2:]
        f_all = self.conv1(torch.cat([f1, f2, f3, f4], 1))
        c = f_all.size(1) // 4
        out = x
        out[:, :, 0:h2, 0:w2] = f_all[:, 0:c]
        out[:, :, h2:, 0:w2] = f_all[:, c:2 * c]
        out[:, :, 0:h2, w2:] = f_all[:, 2 * c:3 * c]
        out[:, :, h2:, w2:] = f_all[:, 3 * c:]
        return out


class FirstOrder(nn.Module):
    def __init__(self):
        super().__init__()
        self.adaptive = nn.AdaptiveAvgPool2d((1, 1))

    def forward(self, x):
        first_c = torch.sigmoid(self.adaptive(x)) * x
        xh = x.permute(0, 2, 1, 3)
        first_h = (torch.sigmoid(self.adaptive(xh)) * xh).permute(0, 2, 1, 3)
        return first_c + first_h + x


class MCAB(nn.Module):
    def __init__(self, n_feats):
        super().__init__()
        self.drb = DRB(n_feats)
        self.csb = CSB(n_feats)
        self.first = FirstOrder()
        self.conv3 = nn.Conv2d(n_feats, n_feats, kernel_size=3, padding=1, bias=False)

    def forward(self, x):
        down_b = self.drb(x)
        top_b = self.csb(x)
        top_b = torch.sigmoid(self.conv3(self.first(top_b)))
        return down_b * top_b


class TinyTSAN(nn.Module):
    def __init__(self, n_feats=16, scale=2):
        super().__init__()
        self.first_conv = nn.Conv2d(3, n_feats, 1)
        self.body1, self.body2 = MCAB(n_feats), MCAB(n_feats)
        self.up = nn.Sequential(nn.Conv2d(n_feats, 3 * scale * scale, 3, padding=1), nn.PixelShuffle(scale))
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        first_out = self.relu(self.first_conv(x))
        out = self.body2(self.body1(first_out))
        return self.up(out + first_out)


if __name__ == "__main__":
    model = TinyTSAN()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    lr_img, hr_img = torch.rand(2, 3, 12, 12), torch.rand(2, 3, 24, 24)
    loss = F.l1_loss(model(lr_img), hr_img)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
