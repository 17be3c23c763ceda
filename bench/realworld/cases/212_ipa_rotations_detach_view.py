# Source: https://github.com/lucidrains/invariant-point-attention/issues/9
# Title: "In-place rotation detach not allowed"
# Diagnosis from the thread: the IPA transformer converts its quaternions to rotation matrices and stops the
# gradient through them between layers with `rotations.detach_()`; the conversion returns a reshape *view*, and
# torch refuses to detach a view in place. `rotations = rotations.detach()` fixes it. Kept from the thread: the
# IPATransformer layer loop (quaternions -> rotations, detach, attention + feed-forward residuals, quaternion and
# translation updates), the quaternion_to_matrix helper ending in a reshape. Added: a simplified point-free
# attention block that uses the rotations, sizes, the denoising-style driver.
import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange


def quaternion_to_matrix(quaternions):
    r, i, j, k = torch.unbind(quaternions, -1)
    two_s = 2.0 / (quaternions * quaternions).sum(-1)
    o = torch.stack((
        1 - two_s * (j * j + k * k), two_s * (i * j - k * r), two_s * (i * k + j * r),
        two_s * (i * j + k * r), 1 - two_s * (i * i + k * k), two_s * (j * k - i * r),
        two_s * (i * k - j * r), two_s * (j * k + i * r), 1 - two_s * (i * i + j * j),
    ), -1)
    return o.reshape(quaternions.shape[:-1] + (3, 3))


def quaternion_multiply(a, b):
    aw, ax, ay, az = torch.unbind(a, -1)
    bw, bx, by, bz = torch.unbind(b, -1)
    return torch.stack((aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                        aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw), -1)


class PointAttention(nn.Module):
    def __init__(self, dim, heads=2):
        super().__init__()
        self.heads = heads
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_points = nn.Linear(dim, heads * 3, bias=False)
        self.to_out = nn.Linear(dim + heads * 3, dim)

    def forward(self, x, rotations, translations):
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=self.heads) for t in (q, k, v))
        points = rearrange(self.to_points(x), "b n (h c) -> b n h c", c=3)
        points = torch.einsum("b n h c, b n c r -> b n h r", points, rotations) + translations[:, :, None]
        attn = (q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5).softmax(dim=-1)
        out = rearrange(attn @ v, "b h n d -> b n (h d)")
        return self.to_out(torch.cat([out, rearrange(points, "b n h c -> b n (h c)")], dim=-1))


class IPATransformer(nn.Module):
    def __init__(self, dim, depth, detach_rotations=True):
        super().__init__()
        self.detach_rotations = detach_rotations
        self.layers = nn.ModuleList([nn.ModuleList([
            PointAttention(dim), nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.ReLU()),
            nn.Linear(dim, 6)]) for _ in range(depth)])

    def forward(self, x, translations, quaternions):
        for attn, ff, to_update in self.layers:
            rotations = quaternion_to_matrix(quaternions)
            if self.detach_rotations:
                rotations.detach_()
            x = attn(x, rotations=rotations, translations=translations) + x
            x = ff(x) + x
            quaternion_update, translation_update = to_update(x).chunk(2, dim=-1)
            quaternion_update = F.pad(quaternion_update, (1, 0), value=1.0)
            quaternions = quaternion_multiply(quaternions, quaternion_update)
            translations = translations + torch.einsum("b n c, b n c r -> b n r", translation_update, rotations)
        return x, translations


if __name__ == "__main__":
    torch.manual_seed(0)
    net = IPATransformer(dim=8, depth=2)
    seq = torch.randn(1, 5, 8)
    coords = torch.randn(1, 5, 3)
    quaternions = F.normalize(torch.randn(1, 5, 4), dim=-1)
    noised_coords = coords + 0.1 * torch.randn_like(coords)
    _, denoised_coords = net(seq, translations=noised_coords, quaternions=quaternions)
    F.mse_loss(denoised_coords, coords).backward()
    print("ok")
