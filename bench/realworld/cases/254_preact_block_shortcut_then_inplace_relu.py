# Thread: https://github.com/pytorch/pytorch/issues/15428
# Title: "Maybe this is something about computing graph?"
# Diagnosis from the thread: a ResNet-style Block computes its shortcut first (a strided 1x1 conv of x when the
# stride or the channel count changes, x itself otherwise) and then its residual branch, an nn.Sequential whose
# first layer is nn.ReLU(inplace=True). That ReLU overwrites x, which the shortcut conv saved for its weight
# gradient, so backward raises; computing the residual first hides the error (the conv then sees the rectified
# x). The answer: "the first layer of self.residual is trying to modify x inplace ... remove inplace=True".
# Kept: the Block with stride / in_chan / out_chan, the conditional shortcut, the residual Sequential that starts
# with the in-place ReLU, blocks stacked into stages behind a conv+BN stem. Added: sizes, a classifier head,
# random images and one SGD step.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, in_chan, out_chan, stride=1):
        super().__init__()
        self.in_chan, self.out_chan, self.stride = in_chan, out_chan, stride
        self.residual = nn.Sequential(
            nn.ReLU(inplace=True),
            nn.Conv2d(in_chan, out_chan, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(out_chan),
            nn.ReLU(inplace=True),
            nn.Conv2d(out_chan, out_chan, 3, padding=1, bias=False),
            nn.BatchNorm2d(out_chan),
        )
        if stride != 1 or in_chan != out_chan:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_chan, out_chan, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_chan),
            )

    def forward(self, x):
        if not self.stride == 1 or not self.in_chan == self.out_chan:
            sc = self.shortcut(x)
        else:
            sc = x
        resd = self.residual(x)
        out = resd + sc
        return out


def make_stage(in_chan, out_chan, n_blocks, stride):
    blocks = [Block(in_chan, out_chan, stride)]
    blocks += [Block(out_chan, out_chan, 1) for _ in range(n_blocks - 1)]
    return nn.Sequential(*blocks)


class Network(nn.Module):
    def __init__(self, n_classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16))
        self.stage1 = make_stage(16, 16, 2, 1)
        self.stage2 = make_stage(16, 32, 2, 2)
        self.fc = nn.Linear(32, n_classes)

    def forward(self, x):
        x = self.stage2(self.stage1(self.stem(x)))
        return self.fc(F.relu(x).mean(dim=(2, 3)))


if __name__ == "__main__":
    net = Network()
    optim = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    images, labels = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    loss = F.cross_entropy(net(images), labels)
    optim.zero_grad()
    loss.backward()
    optim.step()
