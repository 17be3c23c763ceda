# Thread: https://github.com/huggingface/pytorch-image-models/pull/156
# Title: "Update activations.py"
# Diagnosis from the thread: the PR made the swish and mish activations in-place by default to save memory
# (about 1 GB less on EfficientNet-B1). The maintainer rejected it: the memory-efficient activations are
# autograd Functions that save x for their hand-written backward, and "if you modify x in-place in forward, you
# need to clone x before saving for backward" - otherwise the backward reads the activation's output instead of
# its input, the gradients are wrong without any error, and the model "won't converge very well". Cloning
# cancels the saving, so the activations stay out of place; the author agreed.
# Kept: the memory-efficient Swish and Mish autograd Functions (save the input, closed-form backward from the
# saved x), their in-place forward, the nn.Module wrappers with an `inplace` flag, an EfficientNet-style block
# (conv, BN, activation, depthwise conv, BN, activation, pooled classifier). Added: sizes, a random batch, and
# the gradient comparison with the same network using the out-of-place forward.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class SwishAutoFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, inplace=False):
        ctx.save_for_backward(x)
        if inplace:
            return x.mul_(torch.sigmoid(x))
        return x.mul(torch.sigmoid(x))

    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.saved_tensors[0]
        x_sigmoid = torch.sigmoid(x)
        return grad_output * (x_sigmoid * (1 + x * (1 - x_sigmoid))), None


class MishAutoFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, inplace=False):
        ctx.save_for_backward(x)
        if inplace:
            return x.mul_(torch.tanh(F.softplus(x)))
        return x.mul(torch.tanh(F.softplus(x)))

    @staticmethod
    def backward(ctx, grad_output):
        x = ctx.saved_tensors[0]
        x_sigmoid = torch.sigmoid(x)
        x_tanh_sp = F.softplus(x).tanh()
        return grad_output.mul(x_tanh_sp + x * x_sigmoid * (1 - x_tanh_sp * x_tanh_sp)), None


class SwishMe(nn.Module):
    def __init__(self, inplace=True):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return SwishAutoFn.apply(x, self.inplace)


class MishMe(nn.Module):
    def __init__(self, inplace=True):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return MishAutoFn.apply(x, self.inplace)


class Block(nn.Module):
    def __init__(self, inplace, c_in=3, c_mid=16, n_classes=5):
        super().__init__()
        self.conv_stem = nn.Conv2d(c_in, c_mid, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_mid)
        self.act1 = SwishMe(inplace=inplace)
        self.conv_dw = nn.Conv2d(c_mid, c_mid, 3, padding=1, groups=c_mid, bias=False)
        self.bn2 = nn.BatchNorm2d(c_mid)
        self.act2 = MishMe(inplace=inplace)
        self.classifier = nn.Linear(c_mid, n_classes)

    def forward(self, x):
        x = self.act1(self.bn1(self.conv_stem(x)))
        x = self.act2(self.bn2(self.conv_dw(x)))
        return self.classifier(x.mean(dim=(2, 3)))


def grads(model, images, labels):
    model.zero_grad()
    F.cross_entropy(model(images), labels).backward()
    return [p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    buggy, fixed = Block(inplace=True), Block(inplace=False)
    fixed.load_state_dict(buggy.state_dict())
    images, labels = torch.randn(4, 3, 8, 8), torch.randint(0, 5, (4,))
    g_bug, g_fix = grads(buggy, images, labels), grads(fixed, images, labels)
    if not all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
