"""torchrl 0.14.1, torchrl/modules/models/rbf_controller.py:107 (gradguard GG103, error): FALSE, shown clean here.

`RBFController.squash_sin` does
    if not isinstance(max_action, torch.Tensor):
        max_action = torch.tensor(max_action, dtype=dtype, device=device)
so `torch.tensor(...)` only ever wraps a Python number: no value is read out of a tensor and no graph
is lost.  A tensor `max_action` skips the branch and keeps its graph.  This script loads the pinned
module itself from bench/corpus (it imports only torch), trains one step with a float bound (the
`torch.tensor` path) and with a bound tensor that requires grad, and gradchecks `squash_sin`.

    python bench/repro/torchrl_rbf_controller_clean.py     # exits 0 when everything runs clean
"""

import importlib.util
from pathlib import Path

import torch

pinned = (Path(__file__).resolve().parent.parent / "corpus" / "torchrl-0.14.1" / "torchrl" / "modules" / "models"
          / "rbf_controller.py")
if not pinned.is_file():
    raise SystemExit(f"{pinned} is missing: run `python bench/build_corpus.py` first")
spec = importlib.util.spec_from_file_location("torchrl_rbf_controller_pinned", pinned)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)

torch.manual_seed(0)
mean = torch.randn(2, 4)
covariance = torch.eye(4).unsqueeze(0).expand(2, -1, -1) * 0.1

controller = module.RBFController(input_dim=4, output_dim=1, max_action=2.0, n_basis=5)  # float: line 107 runs
action_mean, action_cov, cross_cov = controller(mean, covariance)
(action_mean.sum() + action_cov.sum() + cross_cov.sum()).backward()
for name, p in controller.named_parameters():
    assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
print("max_action=2.0 (torch.tensor path): backward ok, every parameter has a nonzero gradient")

bound = torch.tensor([2.0], requires_grad=True)
controller = module.RBFController(input_dim=4, output_dim=1, max_action=bound, n_basis=5)  # tensor: branch skipped
action_mean, _, _ = controller(mean, covariance)
action_mean.sum().backward()
assert bound.grad is not None and bound.grad.abs().sum() > 0
print("max_action a tensor that requires grad: it gets its gradient (the isinstance branch is skipped)")

m = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
a = torch.randn(3, 2, 2, dtype=torch.float64)
c = (a @ a.mT + torch.eye(2, dtype=torch.float64)).requires_grad_()
assert torch.autograd.gradcheck(lambda m, c: module.RBFController.squash_sin(m, c, 1.5), (m, c))
print("gradcheck of squash_sin with a float max_action: ok")
