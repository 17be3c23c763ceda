# Source: https://github.com/XuezheMax/wolf/pull/1
# Title: "'tiny change'"
# Thread: on PyTorch 1.7 the affine coupling of the Wolf flow raised "one of the variables needed for
# gradient computation has been modified by an inplace operation" at
# `scale = log_scale.mul_(0.5).tanh_().mul(self.alpha).add(1.0)`, where `mu, log_scale =
# params.chunk(2, dim=self.dim)`. The contributor cloned log_scale first; the author (who used the
# in-place ops to save memory) suggested the out-of-place `log_scale.mul(0.5).tanh().mul(...).add(1.0)`.
# Kept: the NICE/affine transform's calc_params (chunk then in-place mul_/tanh_ on one chunk), the
# coupling layer's forward computing z * scale + mu and the log-determinant. Added: the small
# conditioning network, the Gaussian prior NLL and the training-step driver.
import math

import torch
import torch.nn as nn


class AffineTransform(nn.Module):
    def __init__(self, dim, alpha):
        super().__init__()
        self.dim = dim
        self.alpha = alpha

    def calc_params(self, params):
        mu, log_scale = params.chunk(2, dim=self.dim)
        scale = log_scale.mul_(0.5).tanh_().mul(self.alpha).add(1.0)
        return mu, scale

    def fwd(self, z, params):
        mu, scale = self.calc_params(params)
        z = scale * z + mu
        logdet = scale.abs().log().flatten(1).sum(dim=1)
        return z, logdet


class AffineCoupling(nn.Module):
    def __init__(self, features=6, hidden=16):
        super().__init__()
        self.half = features // 2
        self.net = nn.Sequential(nn.Linear(self.half, hidden), nn.ELU(), nn.Linear(hidden, 2 * (features - self.half)))
        self.transform = AffineTransform(dim=1, alpha=1.0)

    def forward(self, x):
        z1, z2 = x[:, : self.half], x[:, self.half :]
        params = self.net(z1)
        z2, logdet = self.transform.fwd(z2, params)
        return torch.cat([z1, z2], dim=1), logdet


if __name__ == "__main__":
    torch.manual_seed(0)
    flow = AffineCoupling()
    optimizer = torch.optim.Adam(flow.parameters(), lr=1e-3)
    x = torch.randn(8, 6)
    optimizer.zero_grad()
    z, logdet = flow(x)
    log_pz = -0.5 * (z ** 2).sum(dim=1) - 0.5 * z.shape[1] * math.log(2 * math.pi)
    nll = -(log_pz + logdet).mean()
    nll.backward()
    optimizer.step()
