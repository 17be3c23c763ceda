# Source: https://github.com/f-dangel/singd/issues/56
# Title: "Bug: Full backward hook incompatible with in-place activations"
# Thread: the SINGD optimizer installs forward hooks (to read layer inputs) and full backward hooks
# (to read output gradients) on every supported layer when it is constructed; a model with
# ReLU(inplace=True) after a hooked Conv2d then fails in the forward pass. The fix (singd PR #63)
# replaces the module full backward hook with a tensor hook installed on the layer output from the
# forward hook.
# Kept: an optimizer that hooks Conv2d/Linear modules at construction, Sequential(Conv2d, ReLU(inplace))
# and the forward that fails. Added: a minimal Kronecker-factor bookkeeping, the flatten+linear head,
# and the training-step driver.
import torch
import torch.nn as nn
import torch.nn.functional as F


class KroneckerPreconditioner(torch.optim.Optimizer):
    SUPPORTED = (nn.Conv2d, nn.Linear)

    def __init__(self, model, lr=0.1, damping=1e-3):
        super().__init__(model.parameters(), dict(lr=lr, damping=damping))
        self.factors = {}
        for name, module in model.named_modules():
            if isinstance(module, self.SUPPORTED):
                module.register_forward_hook(self._save_input(name))
                module.register_full_backward_hook(self._save_grad_output(name))

    def _save_input(self, name):
        def hook(module, inputs, output):
            a = inputs[0].detach().flatten(1)
            self.factors.setdefault(name, {})["A"] = a.T @ a / a.shape[0]
        return hook

    def _save_grad_output(self, name):
        def hook(module, grad_input, grad_output):
            g = grad_output[0].detach().flatten(1)
            self.factors.setdefault(name, {})["G"] = g.T @ g / g.shape[0]
        return hook

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 2, 3),
        nn.ReLU(inplace=True),
        nn.Flatten(),
        nn.Linear(2 * 3 * 3, 4),
    )
    optim = KroneckerPreconditioner(model)
    X, y = torch.rand(2, 1, 5, 5), torch.tensor([0, 3])
    optim.zero_grad()
    loss = F.cross_entropy(model(X), y)
    loss.backward()
    optim.step()
