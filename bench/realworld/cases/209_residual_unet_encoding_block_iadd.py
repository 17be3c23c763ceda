# Source: https://github.com/fepegar/unet/issues/36
# Title: "Error with inplace operations due to recent changes in pytorch"
# Diagnosis from the thread: with residual=True the UNet's encoding/decoding blocks add the 1x1-conv shortcut
# to the output of the second convolutional block with `x += connection`; that block ends in a ReLU, which
# saves its output for backward, so the in-place add breaks backward (`x = x + connection` fixes it). Kept from
# the thread: a UNet2D with residual blocks built from ConvolutionalBlock(conv, [norm], activation), encoder
# and decoder with skip concatenation, and the driver (ones input, BCEWithLogitsLoss, backward). Added: sizes.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvolutionalBlock(nn.Module):
    def __init__(self, in_ch, out_ch, normalization=None, activation="ReLU"):
        super().__init__()
        layers = [nn.Conv2d(in_ch, out_ch, 3, padding=1)]
        if normalization == "batch":
            layers.append(nn.BatchNorm2d(out_ch))
        if activation is not None:
            layers.append(getattr(nn, activation)())
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        return self.block(x)


class EncodingBlock(nn.Module):
    def __init__(self, in_ch, out_ch, residual):
        super().__init__()
        self.residual = residual
        self.conv1 = ConvolutionalBlock(in_ch, out_ch)
        self.conv2 = ConvolutionalBlock(out_ch, out_ch)
        if residual:
            self.conv_residual = nn.Conv2d(in_ch, out_ch, 1)

    def forward(self, x):
        if self.residual:
            connection = self.conv_residual(x)
            x = self.conv1(x)
            x = self.conv2(x)
            x += connection
        else:
            x = self.conv2(self.conv1(x))
        skip = x
        return F.max_pool2d(x, 2), skip


class DecodingBlock(nn.Module):
    def __init__(self, in_ch, skip_ch, out_ch):
        super().__init__()
        self.up = nn.Upsample(scale_factor=2)
        self.conv1 = ConvolutionalBlock(in_ch + skip_ch, out_ch)

    def forward(self, skip, x):
        return self.conv1(torch.cat([skip, self.up(x)], dim=1))


class UNet2D(nn.Module):
    def __init__(self, in_channels, out_classes, residual=False, num_encoding_blocks=2, features=4):
        super().__init__()
        chans = [in_channels] + [features * 2 ** i for i in range(num_encoding_blocks)]
        self.encoders = nn.ModuleList([EncodingBlock(a, b, residual) for a, b in zip(chans[:-1], chans[1:])])
        self.bottom = ConvolutionalBlock(chans[-1], chans[-1])
        self.decoders = nn.ModuleList([DecodingBlock(c, c, c // 2 if i < num_encoding_blocks - 1 else c)
                                       for i, c in enumerate(reversed(chans[1:]))])
        self.classifier = nn.Conv2d(self.decoders[-1].conv1.block[0].out_channels, out_classes, 1)

    def forward(self, x):
        skips = []
        for enc in self.encoders:
            x, skip = enc(x)
            skips.append(skip)
        x = self.bottom(x)
        for dec, skip in zip(self.decoders, reversed(skips)):
            x = dec(skip, x)
        return self.classifier(x)


if __name__ == "__main__":
    torch.manual_seed(0)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    input = torch.ones([2, 3, 8, 8])
    targets = torch.ones([2, 5, 8, 8])
    unet_model = UNet2D(in_channels=3, out_classes=5, residual=True, num_encoding_blocks=2)
    out = unet_model(input)
    loss = loss_fn(out, targets)
    loss.backward()
    print("ok")
