# Thread: https://github.com/pytorch/pytorch/issues/34429
# Title: "Why do PyTorch not support two successive inplace ReLU operations?"
# Diagnosis from the thread: conv -> BatchNorm -> ReLU(inplace=True) -> ReLU(inplace=True) fails at backward()
# with "modified by an inplace operation". The answer points at version tracking: the first in-place ReLU saves
# its result (the tensor it overwrote) for its backward, and the second in-place ReLU overwrites that same
# tensor again, so the saved value is stale. (A following `+=` is fine, since add saves nothing.) Fix: make
# the second ReLU (or both) out of place.
# Kept: the 1x1 conv (no bias) -> BatchNorm2d -> relu1 (inplace) -> relu2 (inplace) chain, flatten and sum.
# Added: the chain wrapped as a stem module whose builder appends the extra activation, a pooled linear head,
# a random batch and one SGD step.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def conv_bn_relu(c_in, c_out):
    return [nn.Conv2d(c_in, c_out, kernel_size=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]


class Net(nn.Module):
    def __init__(self, width=32, n_classes=4):
        super().__init__()
        layers = conv_bn_relu(3, width)
        layers.append(nn.ReLU(inplace=True))
        self.stem = nn.Sequential(*layers)
        self.head = nn.Linear(width, n_classes)

    def forward(self, x):
        x = self.stem(x)
        return self.head(x.mean(dim=(2, 3)))


if __name__ == "__main__":
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    images, labels = torch.randn(10, 3, 8, 8), torch.randint(0, 4, (10,))
    loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
