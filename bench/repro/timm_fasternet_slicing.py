"""timm 1.0.31, timm/models/fasternet.py:55 (gradguard GG001, error): a real bug if used in training.

`Partial_conv3.forward_slicing` does
    x = x.clone()
    x[:, :self.dim_conv3, :, :] = self.partial_conv3(x[:, :self.dim_conv3, :, :])
The conv saves its input, a view of `x`, for backward (to compute the weight gradient); the
slice assignment then writes the conv's output into that very storage, so backward raises.
timm marks the method "only for inference" and builds its models with forward='split_cat', so the
shipped models train; anyone selecting forward='slicing' (a constructor argument) and training hits
this.  This is the same code, minimal, with timm's own class when timm is installed.

    python bench/repro/timm_fasternet_slicing.py     # exits 0 when the bug reproduces
"""

import torch
from torch import nn


class Partial_conv3(nn.Module):  # copied from timm 1.0.31 (device/dtype arguments dropped)
    def __init__(self, dim: int, n_div: int):
        super().__init__()
        self.dim_conv3 = dim // n_div
        self.dim_untouched = dim - self.dim_conv3
        self.partial_conv3 = nn.Conv2d(self.dim_conv3, self.dim_conv3, 3, 1, 1, bias=False)

    def forward_slicing(self, x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x[:, :self.dim_conv3, :, :] = self.partial_conv3(x[:, :self.dim_conv3, :, :])
        return x

    def forward_split_cat(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = torch.split(x, [self.dim_conv3, self.dim_untouched], dim=1)
        return torch.cat((self.partial_conv3(x1), x2), 1)


torch.manual_seed(0)
m = Partial_conv3(16, 4)
x = torch.randn(2, 16, 8, 8, requires_grad=True)

m.forward_split_cat(x).sum().backward()
print("forward_split_cat (timm's default): backward ok")

with torch.no_grad():
    m.forward_slicing(x)
print("forward_slicing under no_grad (inference, what timm intends): ok")

try:
    m.forward_slicing(x).sum().backward()
except RuntimeError as e:
    print("forward_slicing with grad: backward raises:", str(e).splitlines()[0][:160])
    raise SystemExit(0)
raise SystemExit("did not reproduce")
