# Thread: https://github.com/argusswift/YOLOv4-pytorch/issues/247
# Title: "When I set the activate='relu', I met the RuntimeError. (Solved)"
# Diagnosis from the thread: switching the default activation of CSPDarknet53's Convolutional layer from 'mish'
# to 'relu' builds nn.ReLU(inplace=True); the last Convolutional of a CSPBlock then returns the output of that
# in-place ReLU, which ReluBackward saved, and CSPBlock.forward adds the residual into it with `out += residual`.
# Backward fails on "output 0 of ReluBackward0, is at version 2; expected version 1". The asker fixed it by
# replacing `out += residual` with `out = out + residual` in CSPBlock.forward (the maintainer thanked him).
# Kept: the activate_name table (relu/leaky built in place, mish and linear as shared instances), the
# Convolutional conv -> bn -> activation layer with its activate argument, CSPBlock with residual = x and the
# optional attention module chosen from a config, CSPStage's split convs, blocks_conv and concat_conv, the
# backbone returning the last feature maps. Added: a tiny backbone with two stages, a config dict instead of the
# repository's config module, a detection-like head and loss on random images, and one optimiser step.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

CFG = {"ATTENTION": {"TYPE": "NONE"}, "ACTIVATE": "relu"}


class Mish(nn.Module):
    def forward(self, x):
        return x * torch.tanh(F.softplus(x))


norm_name = {"bn": nn.BatchNorm2d}
activate_name = {"relu": nn.ReLU, "leaky": nn.LeakyReLU, "linear": nn.Identity(), "mish": Mish()}


class SEModule(nn.Module):
    def __init__(self, channels, reduction=4):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(channels, channels // reduction), nn.ReLU(),
                                nn.Linear(channels // reduction, channels), nn.Sigmoid())

    def forward(self, x):
        return x * self.fc(x.mean(dim=(2, 3)))[:, :, None, None]


class Convolutional(nn.Module):
    def __init__(self, filters_in, filters_out, kernel_size, stride=1, norm="bn", activate=CFG["ACTIVATE"]):
        super().__init__()
        self.norm, self.activate = norm, activate
        self.__conv = nn.Conv2d(filters_in, filters_out, kernel_size, stride, kernel_size // 2, bias=not norm)
        if norm:
            self.__norm = norm_name[norm](num_features=filters_out)
        if activate:
            if activate == "leaky":
                self.__activate = activate_name[activate](negative_slope=0.1, inplace=True)
            if activate == "relu":
                self.__activate = activate_name[activate](inplace=True)
            if activate == "mish":
                self.__activate = activate_name[activate]

    def forward(self, x):
        x = self.__conv(x)
        if self.norm:
            x = self.__norm(x)
        if self.activate:
            x = self.__activate(x)
        return x


class CSPBlock(nn.Module):
    def __init__(self, in_channels, out_channels, hidden_channels=None):
        super().__init__()
        hidden_channels = out_channels if hidden_channels is None else hidden_channels
        self.block = nn.Sequential(Convolutional(in_channels, hidden_channels, 1),
                                   Convolutional(hidden_channels, out_channels, 3))
        self.attention = CFG["ATTENTION"]["TYPE"]
        if self.attention == "SEnet":
            self.attention_module = SEModule(out_channels)
        else:
            self.attention = None

    def forward(self, x):
        residual = x
        out = self.block(x)
        if self.attention is not None:
            out = self.attention_module(out)
        out += residual
        return out


class CSPStage(nn.Module):
    def __init__(self, in_channels, out_channels, num_blocks):
        super().__init__()
        self.downsample_conv = Convolutional(in_channels, out_channels, 3, stride=2)
        self.split_conv0 = Convolutional(out_channels, out_channels // 2, 1)
        self.split_conv1 = Convolutional(out_channels, out_channels // 2, 1)
        self.blocks_conv = nn.Sequential(*[CSPBlock(out_channels // 2, out_channels // 2) for _ in range(num_blocks)],
                                         Convolutional(out_channels // 2, out_channels // 2, 1))
        self.concat_conv = Convolutional(out_channels, out_channels, 1)

    def forward(self, x):
        x = self.downsample_conv(x)
        x0 = self.split_conv0(x)
        x1 = self.blocks_conv(self.split_conv1(x))
        return self.concat_conv(torch.cat([x1, x0], dim=1))


class CSPDarknetTiny(nn.Module):
    def __init__(self, stem_channels=8, feature_channels=(16, 32), num_features=2):
        super().__init__()
        self.stem_conv = Convolutional(3, stem_channels, 3)
        self.stages = nn.ModuleList([CSPStage(stem_channels, feature_channels[0], 1),
                                     CSPStage(feature_channels[0], feature_channels[1], 2)])
        self.num_features = num_features

    def forward(self, x):
        x = self.stem_conv(x)
        features = []
        for stage in self.stages:
            x = stage(x)
            features.append(x)
        return features[-self.num_features:]


class TinyYolo(nn.Module):
    def __init__(self, n_anchors=3, n_classes=4):
        super().__init__()
        self.backbone = CSPDarknetTiny()
        self.heads = nn.ModuleList([nn.Conv2d(c, n_anchors * (5 + n_classes), 1) for c in (16, 32)])

    def forward(self, x):
        return [head(f) for head, f in zip(self.heads, self.backbone(x))]


if __name__ == "__main__":
    model = TinyYolo()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    images = torch.randn(2, 3, 32, 32)
    preds = model(images)
    loss = sum(F.mse_loss(p, torch.zeros_like(p)) for p in preds)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
