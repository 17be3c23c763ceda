# Source: https://github.com/sniklaus/softmax-splatting/issues/50
# Title: "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation"
# Thread: the softmax-splatting autograd.Function saves its inputs (`save_for_backward(tenIn, tenFlow)`)
# and the user's network modifies one of those tensors in place after the splatting call, so the
# Function's backward finds a saved tensor at a newer version. The reporter fixed it by saving clones
# (`save_for_backward(tenIn.clone(), tenFlow.clone())`); the maintainer asked which layers come before
# and after the splatting, i.e. the in-place op is in the surrounding network.
# Kept: a Function whose forward saves its input tensors and whose backward needs them, the
# surrounding frame-interpolation model that applies an in-place op to the splatted feature tensor
# afterwards. Added: a forward-warping by integer flow rounding (no CuPy), a tiny feature pyramid
# level, the in-place LeakyReLU in the synthesis branch, and the training-step driver.
import torch
import torch.nn as nn
import torch.nn.functional as F


class SoftSplat(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tenIn, tenFlow):
        ctx.save_for_backward(tenIn, tenFlow)
        n, c, h, w = tenIn.shape
        shift = tenFlow.mean(dim=(2, 3)).round().long()
        out = torch.zeros_like(tenIn)
        for b in range(n):
            out[b] = torch.roll(tenIn[b], shifts=(int(shift[b, 1]), int(shift[b, 0])), dims=(1, 2))
        return out

    @staticmethod
    def backward(ctx, gradOut):
        tenIn, tenFlow = ctx.saved_tensors
        shift = tenFlow.mean(dim=(2, 3)).round().long()
        gradIn = torch.zeros_like(tenIn)
        for b in range(tenIn.shape[0]):
            gradIn[b] = torch.roll(gradOut[b], shifts=(-int(shift[b, 1]), -int(shift[b, 0])), dims=(1, 2))
        gradFlow = torch.zeros_like(tenFlow)
        return gradIn, gradFlow


class Interpolator(nn.Module):
    def __init__(self, ch=4):
        super().__init__()
        self.extract = nn.Conv2d(3, ch, 3, padding=1)
        self.flow = nn.Conv2d(6, 2, 3, padding=1)
        self.synth = nn.Conv2d(2 * ch, 3, 3, padding=1)

    def forward(self, frame0, frame1):
        feat0 = self.extract(frame0)
        flow = self.flow(torch.cat([frame0, frame1], dim=1))
        warped = SoftSplat.apply(feat0, flow)
        F.leaky_relu(feat0, 0.1, inplace=True)
        return self.synth(torch.cat([feat0, warped], dim=1))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Interpolator()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    f0, f1, target = torch.randn(2, 3, 8, 8), torch.randn(2, 3, 8, 8), torch.randn(2, 3, 8, 8)
    opt.zero_grad()
    F.l1_loss(model(f0, f1), target).backward()
    opt.step()
