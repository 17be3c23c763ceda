"""timm 1.0.31, timm/models/tnt.py:53 and :65 (gradguard GG005, error): a real bug.

`Attention` builds `self.attn_drop = nn.Dropout(attn_drop, inplace=True)` and applies it to
`attn.softmax(dim=-1)`.  softmax saves its *output* for backward; an in-place dropout with p > 0
overwrites it, so backward raises.  With timm's default attn_drop_rate=0.0, nn.Dropout(p=0) is the
identity and nothing happens, which is why the bug is latent.  This is the same code, minimal.

    python bench/repro/timm_tnt_attn_dropout.py     # exits 0 when the bug reproduces
"""

import torch
from torch import nn


def attention(q, k, v, attn_drop):  # the body of timm's tnt.Attention.forward
    attn = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    attn = attn.softmax(dim=-1)
    attn = attn_drop(attn)
    return attn @ v


torch.manual_seed(0)
q, k, v = (torch.randn(2, 4, 8, 16, requires_grad=True) for _ in range(3))

attention(q, k, v, nn.Dropout(0.0, inplace=True)).sum().backward()  # the default: fine (identity)
print("attn_drop=0.0: backward ok (the default, why the bug is latent)")

attention(q, k, v, nn.Dropout(0.1, inplace=False)).sum().backward()  # gradguard's fix: fine
print("attn_drop=0.1, inplace=False: backward ok (the fix)")

try:
    attention(q, k, v, nn.Dropout(0.1, inplace=True)).sum().backward()  # timm's code with attn_drop > 0
except RuntimeError as e:
    print("attn_drop=0.1, inplace=True: backward raises:", str(e).splitlines()[0][:160])
    raise SystemExit(0)
raise SystemExit("did not reproduce")
