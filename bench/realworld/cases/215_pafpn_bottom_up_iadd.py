# Source: https://github.com/open-mmlab/mmdetection/pull/9450
# Title: "[Fix] Fix backward inplace error with pafpn"
# Diagnosis from the thread: PAFPN's bottom-up path accumulates into its intermediate outputs with
# `inter_outs[i + 1] += self.downsample_convs[i](inter_outs[i])`; when the ConvModules carry an activation
# (act_cfg=dict(type='ReLU')) those outputs are ReLU outputs saved for backward, so training raises. The fix is
# to stop doing the add in place. Kept from the thread: an FPN top-down pass, PAFPN's fpn_convs /
# downsample_convs / pafpn_convs built from ConvModule(conv, act) with an act_cfg, the bottom-up in-place add.
# Added: a three-level toy backbone output, channel sizes, the detection-head stand-in loss.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvModule(nn.Module):
    def __init__(self, in_ch, out_ch, k, stride=1, padding=0, act_cfg=None):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, k, stride=stride, padding=padding)
        self.activate = getattr(nn, act_cfg["type"])() if act_cfg is not None else None

    def forward(self, x):
        x = self.conv(x)
        return self.activate(x) if self.activate is not None else x


class PAFPN(nn.Module):
    def __init__(self, in_channels, out_channels, act_cfg=None):
        super().__init__()
        n = len(in_channels)
        self.lateral_convs = nn.ModuleList([ConvModule(c, out_channels, 1, act_cfg=act_cfg) for c in in_channels])
        self.fpn_convs = nn.ModuleList([ConvModule(out_channels, out_channels, 3, padding=1, act_cfg=act_cfg)
                                        for _ in range(n)])
        self.downsample_convs = nn.ModuleList([ConvModule(out_channels, out_channels, 3, stride=2, padding=1,
                                                          act_cfg=act_cfg) for _ in range(n - 1)])
        self.pafpn_convs = nn.ModuleList([ConvModule(out_channels, out_channels, 3, padding=1, act_cfg=act_cfg)
                                          for _ in range(n - 1)])

    def forward(self, inputs):
        laterals = [lateral_conv(inputs[i]) for i, lateral_conv in enumerate(self.lateral_convs)]
        used_backbone_levels = len(laterals)
        for i in range(used_backbone_levels - 1, 0, -1):
            prev_shape = laterals[i - 1].shape[2:]
            laterals[i - 1] = laterals[i - 1] + F.interpolate(laterals[i], size=prev_shape, mode="nearest")
        inter_outs = [self.fpn_convs[i](laterals[i]) for i in range(used_backbone_levels)]
        for i in range(0, used_backbone_levels - 1):
            inter_outs[i + 1] += self.downsample_convs[i](inter_outs[i])
        outs = [inter_outs[0]]
        outs.extend([self.pafpn_convs[i - 1](inter_outs[i]) for i in range(1, used_backbone_levels)])
        return tuple(outs)


if __name__ == "__main__":
    torch.manual_seed(0)
    neck = PAFPN(in_channels=[4, 8, 16], out_channels=6, act_cfg=dict(type="ReLU"))
    feats = [torch.randn(1, 4, 16, 16), torch.randn(1, 8, 8, 8), torch.randn(1, 16, 4, 4)]
    outs = neck(feats)
    loss = sum(o.mean() for o in outs)
    loss.backward()
    print("ok")
