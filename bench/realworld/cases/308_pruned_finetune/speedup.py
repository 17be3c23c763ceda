import torch
import torch.nn as nn


def channel_mask(conv, keep_ratio=0.5):
    norms = conv.weight.detach().abs().sum(dim=(1, 2, 3))
    k = max(1, int(conv.out_channels * keep_ratio))
    return norms.topk(k).indices.sort().values


class ModelSpeedup:
    """Replaces masked layers with smaller dense ones, copying the kept weights."""

    def __init__(self, model, keep_ratio=0.5):
        self.model = model
        self.keep_ratio = keep_ratio

    def speedup_model(self):
        m = self.model
        keep = channel_mask(m.conv1, self.keep_ratio)
        new_conv1 = nn.Conv2d(3, len(keep), 3, padding=1)
        new_conv2 = nn.Conv2d(len(keep), m.conv2.out_channels, 3, padding=1)
        with torch.no_grad():
            new_conv1.weight.copy_(m.conv1.weight[keep])
            new_conv1.bias.copy_(m.conv1.bias[keep])
            new_conv2.weight.copy_(m.conv2.weight[:, keep])
            new_conv2.bias.copy_(m.conv2.bias)
        m.conv1 = new_conv1
        m.conv2 = new_conv2
        return m
