"""mmpretrain 1.2.0, mmpretrain/models/selfsup/cae.py:38 (gradguard GG002, warning): real, latent (an option's value).

The DALL-E tokenizer's `Conv2d.__init__(..., requires_grad: bool = False)` makes
`w = torch.empty(..., requires_grad=requires_grad)` and then `w.normal_(std=...)` outside
`torch.no_grad()`.  With the default False this is fine (and `nn.Parameter(w)` makes the weight
trainable anyway); with the documented `requires_grad=True` (a parameter of `Conv2d`, `EncoderBlock` and
`DALLEEncoder`, "Require gradient or not") the constructor raises, because `w` is then a leaf that
requires grad.  mmpretrain's configs keep the default, so the bug is latent.

mmpretrain does not import without mmcv's compiled ops, so `Conv2d` is copied faithfully from
cae.py:22-60 (BaseModule -> nn.Module).

    python bench/repro/mmpretrain_cae_conv_requires_grad.py     # exits 0 when the bug reproduces
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Conv2d(nn.Module):  # cae.py:22
    def __init__(self, n_in: int, n_out: int, kw: int, use_float16: bool = True,
                 device: torch.device = torch.device('cpu'), requires_grad: bool = False) -> None:
        super().__init__()
        w = torch.empty((n_out, n_in, kw, kw), dtype=torch.float32, device=device, requires_grad=requires_grad)
        w.normal_(std=1 / math.sqrt(n_in * kw**2))  # line 38
        b = torch.zeros((n_out, ), dtype=torch.float32, device=device, requires_grad=requires_grad)
        self.kw = kw
        self.w, self.b = nn.Parameter(w), nn.Parameter(b)
        self.use_float16 = use_float16

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_float16 and 'cuda' in self.w.device.type:
            if x.dtype != torch.float16:
                x = x.half()
            w, b = self.w.half(), self.b.half()
        else:
            if x.dtype != torch.float32:
                x = x.float()
            w, b = self.w, self.b
        return F.conv2d(x, w, b, padding=(self.kw - 1) // 2)


conv = Conv2d(3, 4, 3)
conv(torch.randn(1, 3, 8, 8)).sum().backward()
print("requires_grad=False (default): constructs and trains")
try:
    Conv2d(3, 4, 3, requires_grad=True)
except RuntimeError as e:
    assert "leaf Variable that requires grad" in str(e), e
    print("requires_grad=True: the constructor raises:", str(e).splitlines()[0])
    raise SystemExit(0)
raise SystemExit("did not reproduce")
