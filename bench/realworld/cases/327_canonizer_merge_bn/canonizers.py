import torch

from .core import ParamMod


class MergeBatchNorm:
    """Merges an eval-mode BatchNorm into the preceding linear layer (and makes the BN an identity)."""

    param_mod_cls = ParamMod

    def __init__(self):
        self.param_mod = self.param_mod_cls()

    def apply(self, linear, batch_norm):
        scale = batch_norm.weight / (batch_norm.running_var + batch_norm.eps).sqrt()
        weight = linear.weight * scale[:, None]
        bias = (linear.bias - batch_norm.running_mean) * scale + batch_norm.bias
        self.param_mod.set_param(linear, "weight", weight)
        self.param_mod.set_param(linear, "bias", bias)
        self.param_mod.set_param(batch_norm, "weight", torch.ones_like(batch_norm.weight))
        self.param_mod.set_param(batch_norm, "bias", torch.zeros_like(batch_norm.bias))
        self.saved_stats = (batch_norm, batch_norm.running_mean.clone(), batch_norm.running_var.clone(), batch_norm.eps)
        batch_norm.running_mean.zero_()
        batch_norm.running_var.fill_(1.0)
        batch_norm.eps = 0.0

    def remove(self):
        self.param_mod.remove()
        batch_norm, mean, var, eps = self.saved_stats
        batch_norm.running_mean.copy_(mean)
        batch_norm.running_var.copy_(var)
        batch_norm.eps = eps
