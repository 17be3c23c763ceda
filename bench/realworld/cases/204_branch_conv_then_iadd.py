# Source: https://discuss.pytorch.org/t/when-would-the-error-one-of-the-variables-needed-for-gradient-computation-has-been-modified-occur/11976
# Title: "When would the error 'one of the variables needed for gradient computation has been modified' occur?"
# Diagnosis from the thread: the main-branch feature map is fed to a side-branch convolution (which saves it
# for its weight gradient) and afterwards updated with `x += ...`; the in-place add changes the tensor the
# side conv saved. `x = x + ...` fixes it; ResNet's `out += residual` is fine only because BatchNorm's output
# is not saved. Kept from the thread: conv1 -> (conv1_p side branch) -> `x += some_layer` on the main branch.
# Added: a two-headed segmentation-style net around it (aux head on the side branch), shapes, the driver.
import torch
import torch.nn as nn
import torch.nn.functional as F


class TwoBranchNet(nn.Module):
    def __init__(self, in_ch=3, width=8, classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, width, 3, padding=1)
        self.conv1_p = nn.Conv2d(width, width, 3, padding=1)
        self.context = nn.Conv2d(in_ch, width, 1)
        self.head = nn.Conv2d(width, classes, 1)
        self.aux_head = nn.Conv2d(width, classes, 1)

    def forward(self, inp):
        x = self.conv1(inp)
        x_p = self.conv1_p(x)
        some_layer = self.context(inp)
        x += some_layer
        x = F.relu(x)
        return self.head(x), self.aux_head(F.relu(x_p))


if __name__ == "__main__":
    torch.manual_seed(0)
    net = TwoBranchNet()
    images = torch.randn(2, 3, 8, 8)
    labels = torch.randint(0, 4, (2, 8, 8))
    main_out, aux_out = net(images)
    loss = F.cross_entropy(main_out, labels) + 0.4 * F.cross_entropy(aux_out, labels)
    loss.backward()
    print("ok")
