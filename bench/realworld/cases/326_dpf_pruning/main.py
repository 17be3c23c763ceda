# Source: https://github.com/INCHEON-CHO/Dynamic_Model_Pruning_with_Feedback/issues/1
# Title: "Should the weights be masked at forward() ?"
# Thread: the DPF re-implementation masks the weights at every forward step with
# `self.conv1.weight.data = torch.mul(self.conv1.weight, self.mask1.weight)`, which overwrites the
# dense weights, so pruned weights are lost instead of being kept for the "feedback" (the paper
# updates the dense weights with the gradient of the masked model and re-selects the mask from them).
# The author agreed the line is wrong and replaced it with an autograd Function that forwards with the
# masked weight while preserving (and updating) the dense weight.
# Kept: a ResNet BasicBlock whose forward assigns the masked product to conv.weight.data, mask modules
# holding the mask in `.weight`, a magnitude-based mask re-selection between steps, and the fix as a
# straight-through masking Function. Added: package layout (masking / resnet / train modules), a tiny
# model, and the comparison of the second step's gradients.
import torch

from .resnet import BasicBlock, BasicBlockFixed, TinyResNet
from .train import train_dpf


def main():
    torch.manual_seed(0)
    images, labels = torch.randn(4, 3, 6, 6), torch.tensor([0, 1, 2, 0])
    buggy = TinyResNet(BasicBlock)
    fixed = TinyResNet(BasicBlockFixed)
    fixed.load_state_dict(buggy.state_dict())
    g_bug = train_dpf(buggy, images, labels)
    g_fix = train_dpf(fixed, images, labels)
    same = all(torch.allclose(a, b) for step_a, step_b in zip(g_bug, g_fix) for a, b in zip(step_a, step_b))
    if not same:
        print("gradguard-case: gradients differ from the fix")


if __name__ == "__main__":
    main()
