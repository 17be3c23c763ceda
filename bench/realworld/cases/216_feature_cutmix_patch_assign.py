# Source: https://github.com/clovaai/CutMix-PyTorch/issues/5
# Title: "how to implement Feature level Cutmix?"
# Diagnosis from the thread: feature-level CutMix is done inside ResNet.forward by pasting a box from shuffled
# samples into the layer1 feature map with a slice assignment, `x[:, :, bbx1:bbx2, bby1:bby2] =
# x[rand_index, :, bbx1:bbx2, bby1:bby2]`; that writes into the output of layer1's last ReLU, which was saved
# for backward, so backward raises "modified by an inplace operation". The maintainers point at the in-place
# ReLU; under torch 2.13 ReLU saves its output either way, so the paste has to be built out of place (mix a
# clone, or torch.where with a box mask). Kept from the thread: a ResNet with BasicBlocks (ReLU(inplace=True)),
# rand_bbox, the CutMix branch between layer1 and layer2 of forward, the lam-weighted two-target loss.
# Added: a small ResNet, CIFAR-sized random batch, fixed lam.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def rand_bbox(size, lam):
    W, H = size[2], size[3]
    cut_rat = np.sqrt(1.0 - lam)
    cut_w, cut_h = int(W * cut_rat), int(H * cut_rat)
    cx, cy = np.random.randint(W), np.random.randint(H)
    bbx1, bby1 = np.clip(cx - cut_w // 2, 0, W), np.clip(cy - cut_h // 2, 0, H)
    bbx2, bby2 = np.clip(cx + cut_w // 2, 0, W), np.clip(cy + cut_h // 2, 0, H)
    return bbx1, bby1, bbx2, bby2


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        residual = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += residual
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, num_classes=10, width=8):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = BasicBlock(width, width)
        self.layer2 = BasicBlock(width, 2 * width, stride=2)
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x, lam=None, rand_index=None):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer1(x)
        if lam is not None:
            # Feature CutMix
            bbx1, bby1, bbx2, bby2 = rand_bbox(x.size(), lam)
            x[:, :, bbx1:bbx2, bby1:bby2] = x[rand_index, :, bbx1:bbx2, bby1:bby2]
        x = self.layer2(x)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


if __name__ == "__main__":
    torch.manual_seed(0)
    np.random.seed(0)
    model = ResNet()
    criterion = nn.CrossEntropyLoss()
    input = torch.randn(4, 3, 16, 16)
    target = torch.randint(0, 10, (4,))
    lam = 0.6
    rand_index = torch.randperm(input.size(0))
    target_a, target_b = target, target[rand_index]
    output = model(input, lam=lam, rand_index=rand_index)
    loss = criterion(output, target_a) * lam + criterion(output, target_b) * (1.0 - lam)
    loss.backward()
    print("ok")
