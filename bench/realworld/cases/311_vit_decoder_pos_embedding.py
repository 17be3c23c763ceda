# Source: https://github.com/thuanz123/enhancing-transformers/issues/11
# Title: "An inplace operation in the forward process"
# Thread: ViTDecoder adds its positional embedding to the incoming tokens in place
# (`token += self.de_pos_embedding`). With two decoders fed the same quantized latent, the second
# decoder rewrites a tensor the first decoder's graph saved, and backward fails. Suggested and
# applied fix: `token = token + self.de_pos_embedding`.
# Kept: a ViT-VQGAN style decoder whose forward starts with the in-place positional add, and two
# decoders (a and b) called on the same `quant`. Added: the tiny encoder/quantizer stand-in, a pre-norm
# MLP block per decoder (standing in for the transformer blocks), reconstruction losses and the driver.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ViTDecoder(nn.Module):
    def __init__(self, num_tokens=4, dim=8, patch_dim=12):
        super().__init__()
        self.de_pos_embedding = nn.Parameter(torch.randn(1, num_tokens, dim) * 0.02)
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 16), nn.GELU(), nn.Linear(16, dim))
        self.to_pixel = nn.Linear(dim, patch_dim)

    def forward(self, token):
        token += self.de_pos_embedding
        x = token + self.mlp(self.norm(token))
        return self.to_pixel(x)


class Encoder(nn.Module):
    def __init__(self, patch_dim=12, dim=8):
        super().__init__()
        self.proj = nn.Linear(patch_dim, dim)

    def forward(self, patches):
        return self.proj(patches)


if __name__ == "__main__":
    torch.manual_seed(0)
    encoder = Encoder()
    decoder_a, decoder_b = ViTDecoder(), ViTDecoder()
    patches = torch.randn(2, 4, 12)
    quant = encoder(patches)
    rec_a = decoder_a(quant)
    rec_b = decoder_b(quant)
    loss = F.mse_loss(rec_a, patches) + F.mse_loss(rec_b, patches)
    loss.backward()
