# Thread: https://github.com/pytorch/pytorch/issues/114505
# Title: "An inplace operation involved in torch.nn.functional.softplus"
# Diagnosis from the thread: computing a Jacobian with torch.autograd.functional.jacobian fails with "modified by
# an inplace operation ... output 0 of AsStridedBackward0" for a function that fills a zeros_like buffer column
# by column: b[:, 0] = a[:, 0], then b[:, 1] = Softplus()(b[:, 0]). Softplus saves its input, the view b[:, 0];
# writing b[:, 1] then bumps the version of b's whole storage. The maintainer's answer: expected - autograd has
# one version counter per storage, so an in-place write to another region of the tensor still invalidates the
# saved view. Passing b[:, 0].clone() to Softplus works (the reporter's own workaround).
# Kept: the buffer-filling function (zeros_like, the first column copied from the input, the second column the
# softplus of the first) and the Jacobian of it. Added: a small network producing the first column (a location
# and a positive scale derived from it), and the Jacobian taken with respect to the network input.
import torch
import torch.nn as nn

torch.manual_seed(0)


class LocScaleHead(nn.Module):
    def __init__(self, d_in=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, 16), nn.Tanh(), nn.Linear(16, 2))
        self.softplus = nn.Softplus()

    def forward(self, features):
        raw = self.net(features)
        out = torch.zeros_like(raw)
        out[:, 0] = raw[:, 0]
        out[:, 1] = self.softplus(out[:, 0])
        return out


if __name__ == "__main__":
    head = LocScaleHead()
    jac = torch.autograd.functional.jacobian(head, torch.randn(3, 4))
    print(jac.shape)
