# Thread: https://github.com/buggyyang/CDC_compression/issues/1
# Title: "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace
#         operation？"
# Diagnosis from the thread: training the conditional-diffusion compression model on one's own data fails with
# the in-place error. The reporter found it in modules/network_components.py: "replace `h += x` with
# `h = h + x`", and the author confirmed newer torch raises where older versions did not. In the denoiser's
# ResnetBlock the time embedding is added in place, `h += self.mlp(time_emb)[:, :, None, None]`, onto the output
# of block1 = Conv -> hand-written channel LayerNorm -> ReLU, and ReLU saved that output for its backward.
# Kept: the hand-written LayerNorm (mean/var over channels, g and b), Block, ResnetBlock with the time-embedding
# MLP and the in-place add, the residual 1x1 conv, SinusoidalPosEmb, a denoiser predicting the noise added at a
# random step, the epsilon-prediction MSE. Added: a two-block denoiser, a linear beta schedule, random images.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        half_dim = self.dim // 2
        emb = torch.exp(torch.arange(half_dim) * -(math.log(10000) / (half_dim - 1)))
        emb = x[:, None] * emb[None, :]
        return torch.cat((emb.sin(), emb.cos()), dim=-1)


class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.g = nn.Parameter(torch.ones(1, dim, 1, 1))
        self.b = nn.Parameter(torch.zeros(1, dim, 1, 1))

    def forward(self, x):
        var = torch.var(x, dim=1, unbiased=False, keepdim=True)
        mean = torch.mean(x, dim=1, keepdim=True)
        return (x - mean) / (var + self.eps).sqrt() * self.g + self.b


class Block(nn.Module):
    def __init__(self, dim, dim_out):
        super().__init__()
        self.block = nn.Sequential(nn.Conv2d(dim, dim_out, 3, padding=1), LayerNorm(dim_out), nn.ReLU())

    def forward(self, x):
        return self.block(x)


class ResnetBlock(nn.Module):
    def __init__(self, dim, dim_out, time_emb_dim=None):
        super().__init__()
        self.mlp = nn.Sequential(nn.LeakyReLU(0.2), nn.Linear(time_emb_dim, dim_out)) if time_emb_dim else None
        self.block1 = Block(dim, dim_out)
        self.block2 = Block(dim_out, dim_out)
        self.res_conv = nn.Conv2d(dim, dim_out, 1) if dim != dim_out else nn.Identity()

    def forward(self, x, time_emb=None):
        h = self.block1(x)
        if time_emb is not None:
            h += self.mlp(time_emb)[:, :, None, None]
        h = self.block2(h)
        return h + self.res_conv(x)


class Denoiser(nn.Module):
    def __init__(self, channels=3, dim=16):
        super().__init__()
        self.time_mlp = nn.Sequential(SinusoidalPosEmb(dim), nn.Linear(dim, dim * 2), nn.GELU(),
                                      nn.Linear(dim * 2, dim))
        self.res1 = ResnetBlock(channels, dim, time_emb_dim=dim)
        self.res2 = ResnetBlock(dim, dim, time_emb_dim=dim)
        self.out = nn.Conv2d(dim, channels, 1)

    def forward(self, x, t):
        emb = self.time_mlp(t)
        return self.out(self.res2(self.res1(x, emb), emb))


if __name__ == "__main__":
    steps = 100
    betas = torch.linspace(1e-4, 0.02, steps)
    alphas_cumprod = torch.cumprod(1 - betas, dim=0)
    model = Denoiser()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x0 = torch.rand(2, 3, 16, 16) * 2 - 1
    t = torch.randint(0, steps, (2,))
    noise = torch.randn_like(x0)
    a = alphas_cumprod[t].view(-1, 1, 1, 1)
    x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
    loss = F.mse_loss(model(x_t, t.float()), noise)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
