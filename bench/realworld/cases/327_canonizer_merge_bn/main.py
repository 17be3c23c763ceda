# Source: https://github.com/chr5tphr/zennit/pull/185
# Title: "Canonizers/ParamMod: Fix Gradients for Parameters"
# Thread: with the MergeBatchNorm canonizer, gradients w.r.t. the model's parameters were not computed
# for the original parameters, because the merged weight/bias were set as new torch.nn.Parameter
# objects (detached from the original parameters / overwriting them). The fix sets the module
# attributes to tensors that depend on the original parameters with object.__setattr__ instead of
# creating a new nn.Parameter, so autograd tracks the gradient back to the original parameters.
# Kept: a ParamMod helper that swaps module parameters and restores them, a MergeBatchNorm canonizer
# merging an eval BatchNorm into the preceding linear layer (BN turned into identity, eps set to 0 and
# restored), and parameter-gradient computation under the canonizer. Added: package layout (core /
# canonizers / attribution modules), a tiny MLP and the comparison with the fixed ParamMod.
import torch
import torch.nn as nn

from .attribution import parameter_relevance
from .canonizers import MergeBatchNorm
from .core import ParamModFixed


class MergeBatchNormFixed(MergeBatchNorm):
    param_mod_cls = ParamModFixed


def make_model():
    model = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.uniform_(-0.2, 0.2)
    return model.eval()


def main():
    torch.manual_seed(0)
    inputs = torch.randn(4, 5)
    base = make_model()
    buggy, fixed = make_model(), make_model()
    buggy.load_state_dict(base.state_dict())
    fixed.load_state_dict(base.state_dict())
    g_bug = parameter_relevance(buggy, [(buggy[0], buggy[1])], inputs, target=1)
    g_fix = parameter_relevance(fixed, [(fixed[0], fixed[1])], inputs, target=1, canonizer_cls=MergeBatchNormFixed)
    as_dense = lambda gs, ps: [torch.zeros_like(p) if g is None else g for g, p in zip(gs, ps)]
    g_bug = as_dense(g_bug, buggy.parameters())
    g_fix = as_dense(g_fix, fixed.parameters())
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")


if __name__ == "__main__":
    main()
