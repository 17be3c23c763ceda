# Source: https://github.com/thuanz123/enhancing-transformers/issues/11
# Title: "An inplace operation in the forward process"
# Diagnosis from the thread: ViTDecoder adds its positional embedding to the incoming token tensor with `+=`,
# which writes into the caller's tensor; when the same quantised latent is decoded by two decoders, the
# second decoder's `+=` changes the tensor the first decoder's layers saved, and backward fails. The fix is
# `token = token + self.de_pos_embedding`. Kept from the thread: a ViT-VQGAN style decoder (pos-embedding add,
# transformer blocks, token-to-pixel head) and two decoders applied to the same `quant`. Added: a small
# pre-norm transformer, an einops patch-to-image head, shapes, the driver and the quantiser stand-in.
import torch
import torch.nn as nn
from einops import rearrange


class PreNormBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.GELU(), nn.Linear(dim * 2, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViTDecoder(nn.Module):
    def __init__(self, image_size, patch_size, dim, depth, heads, channels=3):
        super().__init__()
        self.grid = image_size // patch_size
        self.patch_size = patch_size
        self.de_pos_embedding = nn.Parameter(torch.randn(1, self.grid * self.grid, dim) * 0.02)
        self.transformer = nn.Sequential(*[PreNormBlock(dim, heads) for _ in range(depth)])
        self.to_pixel = nn.Linear(dim, channels * patch_size * patch_size)

    def forward(self, token):
        x = token
        x += self.de_pos_embedding
        x = self.transformer(x)
        x = self.to_pixel(x)
        return rearrange(x, "b (h w) (p1 p2 c) -> b c (h p1) (w p2)", h=self.grid, p1=self.patch_size,
                         p2=self.patch_size)


class Encoder(nn.Module):
    def __init__(self, in_dim, dim):
        super().__init__()
        self.proj = nn.Linear(in_dim, dim)

    def forward(self, x):
        return torch.tanh(self.proj(x))


if __name__ == "__main__":
    torch.manual_seed(0)
    encoder = Encoder(in_dim=12, dim=16)
    decoder_a = ViTDecoder(image_size=8, patch_size=4, dim=16, depth=2, heads=2)
    decoder_b = ViTDecoder(image_size=8, patch_size=4, dim=16, depth=1, heads=2)
    features = torch.randn(2, 4, 12)
    quant = encoder(features)
    rec_a = decoder_a(quant)
    rec_b = decoder_b(quant)
    target = torch.randn(2, 3, 8, 8)
    loss = (rec_a - target).pow(2).mean() + (rec_b - target).abs().mean()
    loss.backward()
    print("ok")
