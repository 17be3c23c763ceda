"""Batch normalisation handed the batch's own statistics as constants (rule GG103).  Imports torch.

With ``training=False`` torch's batch norm normalises with the ``running_mean``/``running_var`` it is given and does
not differentiate through them: it refuses running statistics that require grad ("not differentiable with respect to
argument 'running_mean'").  Code that computes the batch's mean and variance itself and passes them detached
(``F.batch_norm(x, mean.detach(), var.detach(), training=False)``), which gets past that refusal, silently loses the
gradient that flows through the statistics back to the input: the input's gradient is that of a fixed affine map,
not of a normalisation by its own statistics.

The probe sees such an op with grad mode on, an input that requires grad, and running statistics equal to the
input's own per-channel mean and variance (biased or not); a backward that runs afterwards makes it a finding at the
user's line of the call.  Costs a membership test per op; the statistics are computed only for such a call.
"""

from __future__ import annotations

import torch

from .frames import UserCode, frame_site, user_frame
from .merge import OWN_STATS_BIASED_NOTE, OWN_STATS_NOTE, OWN_STATS_UNBIASED_NOTE
from .model import Note, ProbeFinding, Site
from .source import expression_at

_Tensor = torch.Tensor
_aten = torch.ops.aten
# op -> the index of its `training` flag (None: the op never trains)
NORM_OPS = {
    _aten.native_batch_norm.default: 5,
    _aten._native_batch_norm_legit.default: 5,
    _aten._native_batch_norm_legit_no_training.default: None,
    _aten.cudnn_batch_norm.default: 5,
}
_RTOL, _ATOL = 1e-4, 1e-6


class OwnStatistics:
    """One per tracer: ``on_norm`` for each op of ``NORM_OPS`` (before it runs), ``on_backward`` for each backward."""

    def __init__(self, user: UserCode, errors: list[str]):
        self.user = user
        self.errors = errors
        self.pending: dict[tuple, tuple[Site, str]] = {}  # -> (the call, the backward's note: which variance)
        self.found: dict[tuple, ProbeFinding] = {}

    def on_norm(self, func, args, frame) -> None:
        try:
            self._on_norm(func, args, frame)
        except Exception as exc:  # noqa: BLE001 - the probe never breaks the user's code
            self.errors.append(f"own statistics: {type(exc).__name__}: {exc}")

    def _on_norm(self, func, args, frame) -> None:
        flag = NORM_OPS[func]
        if (flag is not None and (len(args) <= flag or args[flag])) or len(args) < 5 or not torch.is_grad_enabled():
            return
        x, mean, var = args[0], args[3], args[4]
        if not (isinstance(x, _Tensor) and isinstance(mean, _Tensor) and isinstance(var, _Tensor)):
            return
        if not x.requires_grad or mean.requires_grad or var.requires_grad or x.dim() < 2:
            return
        channels = x.shape[1]
        per_channel = x.numel() // max(channels, 1)
        if per_channel < 2 or mean.shape != (channels,) or var.shape != (channels,):
            return
        dims = [d for d in range(x.dim()) if d != 1]
        with torch.no_grad():  # inside the dispatch mode: these ops do not come back to it
            own_mean = x.mean(dim=dims)
            if not torch.allclose(own_mean.to(mean.dtype), mean, rtol=_RTOL, atol=_ATOL):
                return
            biased = x.var(dim=dims, unbiased=False).to(var.dtype)
            unbiased = biased * (per_channel / (per_channel - 1))
            is_biased = torch.allclose(biased, var, rtol=_RTOL, atol=_ATOL)
            is_unbiased = torch.allclose(unbiased, var, rtol=_RTOL, atol=_ATOL)
            if not (is_biased or is_unbiased):
                return
        note = OWN_STATS_NOTE if is_biased == is_unbiased else OWN_STATS_BIASED_NOTE if is_biased \
            else OWN_STATS_UNBIASED_NOTE
        frame = user_frame(frame, self.user)
        if frame is None:
            return
        site = frame_site(frame)
        del frame
        key = (site.path, site.line)
        if key not in self.found:
            self.pending.setdefault(key, (site, note))

    def on_backward(self, backward: Site | None) -> None:
        """A backward runs after the calls: the gradient it computes is the one without the statistics' part."""
        pending, self.pending = self.pending, {}
        for key, (site, note) in pending.items():
            said = expression_at(site)
            what = f"`{said}`" if said else "this batch norm"
            at = f" at line {backward.line}" if backward else ""
            message = (f"{what} runs batch norm with training=False on an input that requires grad, with running "
                       "statistics equal to that input's own mean and variance, passed without a graph: batch norm "
                       "does not differentiate through running statistics, so the gradient through the batch "
                       f"statistics back to the input is lost in the backward(){at} (it treats them as constants). "
                       "Normalise with tensor ops ((x - mean) / sqrt(var + eps), statistics kept attached) instead")
            notes = (Note(backward, note),) if backward else ()
            self.found[key] = ProbeFinding("GG103", "silent", site, message, notes=notes, backward=backward)

    def findings(self) -> list[ProbeFinding]:
        return list(self.found.values())
