"""asteroid 0.7.0, asteroid/dsp/beamforming.py:246 (gradguard GG001, warning): a real bug.

`GEVBeamformer.compute_beamforming_vector` normalises the principal generalized eigenvector in place:
    bf_vect = e_vec[..., -1]
    bf_vect /= torch.norm(bf_vect, dim=-1, keepdim=True)
`torch.norm` saves its input (and result) for backward, and `/=` then overwrites that input, so
backpropagating through `GEVBeamformer` (e.g. into the network that estimates the masks from which the
SCMs are computed, the usual mask-based beamforming training) raises at `backward()`.  The out-of-place
`bf_vect = bf_vect / torch.norm(...)` trains.

The pinned module itself is loaded from bench/corpus by path (it imports only torch; `import asteroid`
needs packages outside this venv).

    python bench/repro/asteroid_gev_normalize_inplace.py     # exits 0 when the bug reproduces
"""

import importlib.util
from pathlib import Path

import torch

pinned = Path(__file__).resolve().parent.parent / "corpus" / "asteroid-0.7.0" / "asteroid" / "dsp" / "beamforming.py"
if not pinned.is_file():
    raise SystemExit(f"{pinned} is missing: run `python bench/build_corpus.py` first")
spec = importlib.util.spec_from_file_location("asteroid_beamforming_pinned", pinned)
bf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bf)

torch.manual_seed(0)
mix = torch.randn(2, 3, 5, 40, dtype=torch.complex64)  # (batch, mics, freqs, frames)
logits = torch.randn(2, 1, 5, 40, requires_grad=True)  # stands in for a mask network's output


def gev_output(compute_vector):
    mask = torch.sigmoid(logits)
    target_scm = bf.compute_scm(mix, mask)
    noise_scm = bf.compute_scm(mix, 1 - mask)
    bf_vect = compute_vector(target_scm, noise_scm)  # what GEVBeamformer.forward does
    return bf.Beamformer.apply_beamforming_vector(bf_vect, mix=mix).abs().sum()  # phase-invariant loss


def fixed_vector(target_scm, noise_scm):  # beamforming.py:237-248 with the division out of place
    noise_scm_t = bf.condition_scm(noise_scm.permute(0, 3, 1, 2), 1e-6)
    e_val, e_vec = bf.generalized_eigenvalue_decomposition(target_scm.permute(0, 3, 1, 2), noise_scm_t)
    bf_vect = e_vec[..., -1]
    bf_vect = bf_vect / torch.norm(bf_vect, dim=-1, keepdim=True)
    return bf_vect.squeeze(-1).transpose(-1, -2)


gev_output(fixed_vector).backward()
assert logits.grad is not None and torch.isfinite(logits.grad).all()
print("out-of-place normalisation: backward ok (the fix)")

assert isinstance(bf.GEVBeamformer()(mix, bf.compute_scm(mix), bf.compute_scm(mix)), torch.Tensor)
try:
    gev_output(bf.GEVBeamformer.compute_beamforming_vector).backward()  # asteroid's code
except RuntimeError as e:
    assert "modified by an inplace operation" in str(e), e
    print("asteroid's GEVBeamformer.compute_beamforming_vector: backward raises:", str(e).splitlines()[0][:170])
    raise SystemExit(0)
raise SystemExit("did not reproduce")
