# Source: https://github.com/naver-ai/rope-vit/issues/14
# Title: "Error in backward"
# Diagnosis from the thread: RoPEAttention rotates the patch tokens of q and k (all but the [CLS] token) and
# writes the result back with a tuple assignment into slices, `q[:, :, 1:], k[:, :, 1:] = apply_rotary_emb(...)`;
# q and k are views of the packed qkv tensor whose complex views were saved by the rotary multiply (the mixed,
# learnable frequencies need them for their gradient), so the slice writes bump the version and backward fails
# on "output 0 of ViewAsComplexBackward0". The maintainers reproduced it; building q/k with torch.cat of the CLS
# token and the rotated tokens avoids the in-place write. Kept from the thread: RoPEAttention(Attention) with
# rope_mixed learnable 2-D frequencies (init_2d_freqs, init_t_xy, compute_mixed_cis), apply_rotary_emb via
# view_as_complex, the slice tuple assignment, a custom ViT block using it. Added: sizes (4x4 patches + CLS),
# two heads, the toy classification loss.
import math

import torch
import torch.nn as nn
from functools import partial


def init_2d_freqs(dim, num_heads, theta=10.0, rotate=True):
    freqs_x, freqs_y = [], []
    mag = 1 / (theta ** (torch.arange(0, dim, 4)[: (dim // 4)].float() / dim))
    for _ in range(num_heads):
        angles = torch.rand(1) * 2 * torch.pi if rotate else torch.zeros(1)
        freqs_x.append(torch.cat([mag * torch.cos(angles), mag * torch.cos(torch.pi / 2 + angles)], dim=-1))
        freqs_y.append(torch.cat([mag * torch.sin(angles), mag * torch.sin(torch.pi / 2 + angles)], dim=-1))
    return torch.stack([torch.stack(freqs_x, dim=0), torch.stack(freqs_y, dim=0)], dim=0)


def init_t_xy(end_x, end_y):
    t = torch.arange(end_x * end_y, dtype=torch.float32)
    return (t % end_x).float(), torch.div(t, end_x, rounding_mode="floor").float()


def compute_mixed_cis(freqs, t_x, t_y, num_heads):
    N = t_x.shape[0]
    freqs_x = (t_x.unsqueeze(-1) @ freqs[0].unsqueeze(-2)).view(N, num_heads, -1).permute(1, 0, 2)
    freqs_y = (t_y.unsqueeze(-1) @ freqs[1].unsqueeze(-2)).view(N, num_heads, -1).permute(1, 0, 2)
    return torch.polar(torch.ones_like(freqs_x), freqs_x + freqs_y)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class Attention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=False):
        super().__init__()
        self.dim = dim
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)


class RoPEAttention(Attention):
    """Multi-head Attention block with rotary position embeddings."""

    def __init__(self, *args, rope_theta=10.0, grid=4, **kwargs):
        super().__init__(*args, **kwargs)
        self.compute_cis = partial(compute_mixed_cis, num_heads=self.num_heads)
        freqs = init_2d_freqs(dim=self.dim // self.num_heads, num_heads=self.num_heads, theta=rope_theta)
        self.rope_freqs = nn.Parameter(freqs, requires_grad=True)
        t_x, t_y = init_t_xy(end_x=grid, end_y=grid)
        self.register_buffer("freqs_t_x", t_x)
        self.register_buffer("freqs_t_y", t_y)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        w = h = int(math.sqrt(N - 1))
        t_x, t_y = self.freqs_t_x, self.freqs_t_y
        if t_x.shape[0] != N - 1:
            t_x, t_y = init_t_xy(end_x=w, end_y=h)
        freqs_cis = self.compute_cis(self.rope_freqs, t_x, t_y)
        q[:, :, 1:], k[:, :, 1:] = apply_rotary_emb(q[:, :, 1:], k[:, :, 1:], freqs_cis=freqs_cis)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = RoPEAttention(dim, num_heads=heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


if __name__ == "__main__":
    torch.manual_seed(0)
    dim, heads = 16, 2
    patch_embed = nn.Linear(12, dim)
    cls_token = nn.Parameter(torch.zeros(1, 1, dim))
    block = Block(dim, heads)
    head = nn.Linear(dim, 3)
    patches = torch.randn(2, 16, 12)
    x = torch.cat([cls_token.expand(2, -1, -1), patch_embed(patches)], dim=1)
    logits = head(block(x)[:, 0])
    nn.functional.cross_entropy(logits, torch.tensor([0, 2])).backward()
    print("ok")
