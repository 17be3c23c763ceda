"""accelerate 1.15.0, accelerate/utils/transformer_engine.py:75,77,82,83 (gradguard GG002, warnings).

`convert_model(model, to_transformer_engine=False)` (called from `extract_model_from_parallel`
without `torch.no_grad()`, unlike the forward conversion in accelerator.py) makes a fresh
`nn.Linear` / `nn.LayerNorm` and copies the TE weights in with `new_module.weight.copy_(...)`.
A fresh module's parameters are leaves that require grad, so `.copy_()` in grad mode raises.
The branch is already broken one line earlier: it passes `params_dtype=` to nn.Linear /
nn.LayerNorm, which take no such argument, so it raises TypeError before reaching the copy.
Both are shown here.

    python bench/repro/accelerate_convert_back.py     # exits 0 when both reproduce
"""

import torch
from torch import nn

src = nn.Linear(8, 8)  # stands in for the te.Linear being converted back
reproduced = 0
try:
    nn.Linear(8, 8, bias=True, params_dtype=src.weight.dtype)  # accelerate's line 71
except TypeError as e:
    print("nn.Linear(..., params_dtype=...) raises:", e)
    reproduced += 1

new_module = nn.Linear(8, 8, bias=True, dtype=src.weight.dtype)  # with the argument corrected
try:
    new_module.weight.copy_(src.weight)  # accelerate's line 75, in grad mode
except RuntimeError as e:
    print("weight.copy_() in grad mode raises:", str(e).splitlines()[0])
    reproduced += 1

with torch.no_grad():  # what the forward conversion does (accelerator.py wraps it in no_grad)
    new_module.weight.copy_(src.weight)
print("weight.copy_() under torch.no_grad(): ok")
raise SystemExit(0 if reproduced == 2 else "did not reproduce")
