"""vit-pytorch 1.26.11, vit_pytorch/vit_nd_pope.py:84 (gradguard GG002, error): a real bug.

`GoldenGatePoPENd.__init__` makes `self.learned_bias = nn.Parameter(torch.zeros(heads, dim_head))` and,
when `init_learned_bias_uniform=True` (reached from `ViTND(pope_init_learned_bias_uniform=True)`), calls
`self.learned_bias.uniform_(-2. * pi, 0.)` outside `torch.no_grad()`.  A fresh Parameter is a leaf that
requires grad, so the constructor itself raises.  With the default (False) nothing happens, which is why
the bug is latent.

The package does not import cleanly here (`vit_pytorch/__init__.py` imports torchvision through dino.py),
so the constructor's lines are copied faithfully from vit_pytorch/vit_nd_pope.py (lines 37-84; the
frequency buffer, which the bug does not touch, is kept).

    python bench/repro/vit_pytorch_pope_uniform_init.py     # exits 0 when the bug reproduces
"""

import torch
import torch.nn.functional as F
from torch import arange, cat, nn, pi


def _phi(m: int) -> float:  # vit_nd_pope.py:37
    x = 2.0
    for _ in range(10):
        x = (1 + x) ** (1.0 / (m + 1.0))
    return x


def make_directions(n: int, d: int) -> torch.Tensor:  # vit_nd_pope.py:43
    g = _phi(d)
    alpha = (1.0 / g) ** arange(1, d + 1, dtype=torch.float64)
    i = arange(1, n + 1, dtype=torch.float64).unsqueeze(1)
    z = torch.fmod(i * alpha, 1.0)
    directions = torch.erfinv(2.0 * z - 1.0)
    directions = F.normalize(directions, dim=-1, p=2)
    return directions.float()


class GoldenGatePoPENd(nn.Module):  # vit_nd_pope.py:52, __init__ only
    def __init__(self, dim_pos, heads, dim_head, min_freq=1.0, max_freq=10000.0, p_zero_freqs=0.0,
                 init_learned_bias_uniform=False):
        super().__init__()
        n_freqs = dim_head
        n_zero_freqs = round(p_zero_freqs * n_freqs)
        omega = cat((torch.zeros(n_zero_freqs),
                     min_freq * (max_freq / min_freq) ** torch.linspace(0, 1, n_freqs - n_zero_freqs)))
        directions = make_directions(heads * n_freqs, dim_pos).reshape(heads, n_freqs, dim_pos)
        self.register_buffer('freqs', directions * omega.reshape(-1, 1))
        self.learned_bias = nn.Parameter(torch.zeros(heads, dim_head))
        if init_learned_bias_uniform:
            self.learned_bias.uniform_(-2. * pi, 0.)  # line 84


GoldenGatePoPENd(dim_pos=2, heads=4, dim_head=16)
print("init_learned_bias_uniform=False (the default): ok")
try:
    GoldenGatePoPENd(dim_pos=2, heads=4, dim_head=16, init_learned_bias_uniform=True)
except RuntimeError as e:
    print("init_learned_bias_uniform=True: the constructor raises:", str(e).splitlines()[0])
    p = nn.Parameter(torch.zeros(4, 16))
    with torch.no_grad():  # the fix
        p.uniform_(-2. * pi, 0.)
    print("under torch.no_grad(): ok")
    raise SystemExit(0)
raise SystemExit("did not reproduce")
