"""espnet 202511, espnet/nets/pytorch_backend/frontends/feature_transform.py:260 (gradguard GG001, warning): a real bug.

`utterance_mvn(x, ilens, norm_means=True, norm_vars=True)` subtracts the mean in place and aliases
`x_ = x`, computes `var = x_.pow(2).sum(dim=1) / ilens_` (pow saves its input, `x`), then divides in
place: `x /= var.sqrt()[:, None, :]`.  The division overwrites what `pow` saved, so backward through the
normalised features (into the frontend before it) raises.  The default (`norm_vars=False`) does not
reach the line; `UtteranceMVN(norm_vars=True)`, i.e. the `uttmvn_norm_vars` option of
`feature_transform_for`, does.

espnet's module imports librosa and torch_complex (not in this venv), so `utterance_mvn` is copied
faithfully from feature_transform.py:228-262; `make_pad_mask` is replaced by an equivalent few lines
(its use on line 255 is `x_.masked_fill(...)` with the result discarded, so it changes nothing).

    python bench/repro/espnet_utterance_mvn_norm_vars.py     # exits 0 when the bug reproduces
"""

import torch


def make_pad_mask(lengths, xs, length_dim):  # stand-in for espnet's nets_utils.make_pad_mask (B, T, D)
    t = torch.arange(xs.size(length_dim))
    return (t[None, :] >= lengths[:, None])[:, :, None].expand_as(xs)


def utterance_mvn(x, ilens, norm_means=True, norm_vars=False, eps=1.0e-20):  # feature_transform.py:228
    ilens_ = ilens.type_as(x)
    # mean: (B, D)
    mean = x.sum(dim=1) / ilens_[:, None]

    if norm_means:
        x -= mean[:, None, :]
        x_ = x
    else:
        x_ = x - mean[:, None, :]

    # Zero padding
    x_.masked_fill(make_pad_mask(ilens, x_, 1), 0.0)
    if norm_vars:
        var = x_.pow(2).sum(dim=1) / ilens_[:, None]
        var = torch.clamp(var, min=eps)
        x /= var.sqrt()[:, None, :]  # line 260
        x_ = x
    return x_, ilens


torch.manual_seed(0)
frontend = torch.nn.Linear(8, 8)  # stands in for the feature extractor before the MVN
inp, ilens = torch.randn(2, 10, 8), torch.tensor([10, 7])

out, _ = utterance_mvn(frontend(inp), ilens)  # defaults: norm_means=True, norm_vars=False
out.sum().backward()
print("norm_vars=False (default): backward ok")
try:
    out, _ = utterance_mvn(frontend(inp), ilens, norm_vars=True)
    out.sum().backward()
except RuntimeError as e:
    assert "modified by an inplace operation" in str(e), e
    print("norm_vars=True: backward raises:", str(e).splitlines()[0][:170])
    raise SystemExit(0)
raise SystemExit("did not reproduce")
