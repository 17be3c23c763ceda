"""torchgeo 0.8.1, torchgeo/models/ltae.py:98 and :124 (gradguard GG005, error): a real bug, in the default configuration.

`LTAE.__init__` builds the head `self.mlp = nn.Sequential(Linear, BatchNorm1d, nn.ReLU(inplace=True), ...)`
and `self.dropout = nn.Dropout(dropout, inplace=True)` with `dropout=0.2` by default; `forward` ends with
`self.outlayernorm(self.dropout(self.mlp(mlp_input)))`.  The in-place ReLU saves its *output* for
backward; the in-place dropout then overwrites that output, so training LTAE (model.train(), the default
after construction) raises at `backward()`.  Only dropout=0 (nn.Dropout(p=0) is the identity) or eval
mode escapes.

Below, the head's lines are copied faithfully from torchgeo/models/ltae.py (lines 85-98 and 124; the
attention part before them does not matter: its output enters as `mlp_input`).  When bench/corpus is
built, the pinned module itself (it imports only torch) is also loaded from the corpus by path and its
LTAE is trained one step: it raises the same way.  (`import torchgeo.models` pulls in packages outside
this venv, so the package is not installed.)

    python bench/repro/torchgeo_ltae_inplace_dropout.py     # exits 0 when the bug reproduces
"""

import importlib.util
from pathlib import Path

import torch
from torch import nn


def head(n_neurons=(256, 128), dropout=0.2, inplace=True):  # ltae.py:85-98
    activation = nn.ReLU(inplace=True)
    layers = []
    for i in range(len(n_neurons) - 1):
        layers.extend([nn.Linear(n_neurons[i], n_neurons[i + 1]), nn.BatchNorm1d(n_neurons[i + 1]), activation])
    mlp = nn.Sequential(*layers)
    return mlp, nn.Dropout(dropout, inplace=inplace), nn.LayerNorm(n_neurons[-1])


torch.manual_seed(0)
mlp_input = torch.randn(8, 256, requires_grad=True)  # attention_output.mean(dim=1)

mlp, drop, outlayernorm = head(inplace=False)  # the fix
outlayernorm(drop(mlp(mlp_input))).sum().backward()
print("nn.Dropout(0.2, inplace=False): backward ok (the fix)")

mlp, drop, outlayernorm = head(dropout=0.0)
outlayernorm(drop(mlp(mlp_input))).sum().backward()
print("dropout=0.0: backward ok (identity)")

reproduced = 0
mlp, drop, outlayernorm = head()  # torchgeo's defaults
try:
    outlayernorm(drop(mlp(mlp_input))).sum().backward()  # ltae.py:124
except RuntimeError as e:
    assert "modified by an inplace operation" in str(e), e
    print("torchgeo's head, dropout=0.2 (default): backward raises:", str(e).splitlines()[0][:170])
    reproduced += 1

pinned = Path(__file__).resolve().parent.parent / "corpus" / "torchgeo-0.8.1" / "torchgeo" / "models" / "ltae.py"
if pinned.is_file():
    spec = importlib.util.spec_from_file_location("torchgeo_ltae_pinned", pinned)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.LTAE()  # defaults: in_channels=128, d_model=256, len_max_seq=24, n_neurons=(256, 128), dropout=0.2
    out = model(torch.randn(4, 24, 128))  # (batch, seq_len=len_max_seq, in_channels)
    try:
        out.sum().backward()
    except RuntimeError as e:
        if "modified by an inplace operation" not in str(e):
            raise
        print("pinned torchgeo LTAE() from bench/corpus: backward raises:", str(e).splitlines()[0][:120])
    else:
        raise SystemExit("the pinned LTAE trained cleanly: did not reproduce")
    model.eval()
    model(torch.randn(4, 24, 128)).sum().backward()
    print("pinned LTAE in eval mode: backward ok")
raise SystemExit(0 if reproduced == 1 else "did not reproduce")
