# Thread: https://github.com/rwightman/gen-efficientnet-pytorch/issues/16
# Title: "Mish inplace question"
# Diagnosis from the thread: asked why the in-place `x.mul_(inner)` line of the Mish activation is commented
# out, the maintainer answered that he first made Mish "a little more efficient with the inplace variation",
# `x.mul_(F.softplus(x).tanh())`, but it "triggered an inplace gradient error (during training)": softplus
# saved x for its backward and the multiply then overwrites x. The out-of-place `x.mul(...)` is what ships.
# Kept: the Mish function with an inplace flag and the nn.Module wrapper, used as the activation after
# conv + BatchNorm as in the EfficientNet/MobileNet blocks of that repository (the asker used it in a YOLO
# backbone). Added: a small conv classifier, random images, one training step with inplace=True.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def mish(x, inplace: bool = False):
    inner = F.softplus(x).tanh()
    return x.mul_(inner) if inplace else x.mul(inner)


class Mish(nn.Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return mish(x, self.inplace)


def conv_bn_act(c_in, c_out, stride=1):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(c_out),
                         Mish(inplace=True))


class Net(nn.Module):
    def __init__(self, n_classes=10):
        super().__init__()
        self.features = nn.Sequential(conv_bn_act(3, 16, 2), conv_bn_act(16, 32, 2))
        self.classifier = nn.Linear(32, n_classes)

    def forward(self, x):
        return self.classifier(self.features(x).mean(dim=(2, 3)))


if __name__ == "__main__":
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    images, labels = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    loss = F.cross_entropy(model(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
