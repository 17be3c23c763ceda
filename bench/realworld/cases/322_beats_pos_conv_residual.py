# Source: https://github.com/microsoft/unilm/pull/999
# Title: "Update L. 116 of backbone.py"
# Thread: fine-tuning BEATs failed with "one of the variables needed for gradient computation has been
# modified by an inplace operation: [torch.cuda.FloatTensor [32, 768, 248]]"; the culprit is the
# in-place residual `x += x_conv` after the convolutional relative positional embedding in the
# transformer encoder (the conv saved `x` for its backward). They replaced it with
# `x = x.clone() + x_conv`.
# Kept: TransformerEncoder.extract_features computing `x_conv = self.pos_conv(x.transpose(1, 2))`,
# transposing back and adding it to x in place, then layer norm and the layers. Added: a small
# feature projection front end, one feed-forward layer, shapes, and a fine-tuning classifier head.
import torch
import torch.nn as nn
import torch.nn.functional as F


class SamePad(nn.Module):
    def __init__(self, kernel_size):
        super().__init__()
        self.remove = 1 if kernel_size % 2 == 0 else 0

    def forward(self, x):
        return x[:, :, : -self.remove] if self.remove > 0 else x


class TransformerEncoder(nn.Module):
    def __init__(self, dim=16, conv_pos=4, conv_groups=4):
        super().__init__()
        self.pos_conv = nn.Sequential(
            nn.Conv1d(dim, dim, kernel_size=conv_pos, padding=conv_pos // 2, groups=conv_groups),
            SamePad(conv_pos),
            nn.GELU(),
        )
        self.layer_norm = nn.LayerNorm(dim)
        self.layers = nn.ModuleList([nn.Sequential(nn.Linear(dim, 32), nn.GELU(), nn.Linear(32, dim))])

    def extract_features(self, x):
        x_conv = self.pos_conv(x.transpose(1, 2))
        x_conv = x_conv.transpose(1, 2)
        x += x_conv
        x = self.layer_norm(x)
        for layer in self.layers:
            x = x + layer(x)
        return x

    def forward(self, x):
        return self.extract_features(x)


class BEATsClassifier(nn.Module):
    def __init__(self, n_mels=8, dim=16, classes=5):
        super().__init__()
        self.post_extract_proj = nn.Linear(n_mels, dim)
        self.encoder = TransformerEncoder(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, fbank):
        features = self.post_extract_proj(fbank)
        x = self.encoder(features)
        return self.head(x.mean(dim=1))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = BEATsClassifier()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    fbank, labels = torch.randn(3, 12, 8), torch.tensor([0, 2, 4])
    opt.zero_grad()
    F.cross_entropy(model(fbank), labels).backward()
    opt.step()
