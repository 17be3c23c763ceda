# Thread: https://github.com/iduta/iresnet/pull/2
# Title: "Fixed error when first inplace ReLU from first middle ResBlock appears on the main data propagation path"
# Diagnosis from the thread: iResNet's BasicBlock / Bottleneck keep `identity = x` and, in the first middle
# block of a stage (exclude_bn0), apply `out = self.relu(x)` with self.relu = nn.ReLU(inplace=True). The in-place
# ReLU rectifies x itself, so identity aliases ReLU(x) and the shortcut carries ReLU(x) instead of x: a ReLU sits
# on the main propagation path where the paper has none. Nothing raises; the forward and the gradients are
# silently those of another network. The fix deletes inplace=True in the blocks that apply self.relu to x.
# Kept: the start / middle(exclude_bn0) / end block roles of _make_layer, bn0 -> relu -> conv1 pre-activation,
# identity = x, out += identity, the end block's bn + relu after the add. Added: small sizes, BasicBlock only,
# one stage, and the fixed block (a subclass with an out-of-place ReLU) in the same process for the gradient
# comparison.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1, downsample=None, start_block=False, end_block=False,
                 exclude_bn0=False):
        super().__init__()
        if not start_block and not exclude_bn0:
            self.bn0 = nn.BatchNorm2d(inplanes)
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        if start_block or end_block:
            self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.start_block, self.end_block, self.exclude_bn0 = start_block, end_block, exclude_bn0

    def forward(self, x):
        identity = x
        if self.start_block:
            out = self.conv1(x)
        elif self.exclude_bn0:
            out = self.relu(x)
            out = self.conv1(out)
        else:
            out = self.bn0(x)
            out = self.relu(out)
            out = self.conv1(out)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        if self.start_block:
            out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        if self.end_block:
            out = self.bn2(out)
            out = self.relu(out)
        return out


class BasicBlockFixed(BasicBlock):
    """The pull request's fix: the block's ReLU no longer works in place."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.relu = nn.ReLU()


class IResStage(nn.Module):
    def __init__(self, block, inplanes, planes, blocks):
        super().__init__()
        downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, bias=False), nn.BatchNorm2d(planes))
        layers = [block(inplanes, planes, 1, downsample, start_block=True)]
        exclude_bn0 = True
        for _ in range(1, blocks - 1):
            layers.append(block(planes, planes, exclude_bn0=exclude_bn0))
            exclude_bn0 = False
        layers.append(block(planes, planes, end_block=True, exclude_bn0=exclude_bn0))
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(planes, 10)

    def forward(self, x):
        return self.fc(self.layers(x).mean(dim=(2, 3)))


def grads(model, images, labels):
    model.zero_grad()
    F.cross_entropy(model(images), labels).backward()
    return [p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    buggy = IResStage(BasicBlock, 8, 16, 3)
    fixed = IResStage(BasicBlockFixed, 8, 16, 3)
    fixed.load_state_dict(buggy.state_dict())
    images, labels = torch.randn(4, 8, 8, 8), torch.randint(0, 10, (4,))
    g_bug, g_fix = grads(buggy, images, labels), grads(fixed, images, labels)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
