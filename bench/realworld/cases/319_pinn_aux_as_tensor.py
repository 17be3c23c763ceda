# Source: https://github.com/lululxvi/deepxde/pull/1318
# Title: "Add auxiliary_variables for pytorch."
# Thread: in review, the author explains why the PyTorch backend's `as_tensor` must special-case a
# list/tuple of tensors: `torch.as_tensor((a, b))` copies the values and loses the gradient
# information (a.grad and b.grad stay None even after setting requires_grad on the result), while
# `torch.stack((a, b))` keeps it; the maintainer agrees that is why stack is used elsewhere.
# Kept: a backend helper `as_tensor(data)` that wraps a tuple of tensors with torch.as_tensor and
# turns on requires_grad afterwards, used to assemble auxiliary PDE variables; the fix uses stack.
# Added: a tiny PINN for u'' = f with learnable source amplitudes as auxiliary variables, and the
# comparison of the parameters' gradients.
import torch
import torch.nn as nn


def as_tensor(data, dtype=None):
    t = torch.as_tensor(data, dtype=dtype)
    t.requires_grad = True
    return t


def as_tensor_fixed(data, dtype=None):
    if isinstance(data, (list, tuple)) and all(isinstance(d, torch.Tensor) for d in data):
        return torch.stack(data)
    return torch.as_tensor(data, dtype=dtype)


class PINN(nn.Module):
    def __init__(self, to_tensor):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
        self.amp_sin = nn.Parameter(torch.tensor([0.5]))
        self.amp_cos = nn.Parameter(torch.tensor([0.2]))
        self.to_tensor = to_tensor

    def auxiliary_variables(self):
        return self.to_tensor((self.amp_sin, self.amp_cos))

    def pde_residual(self, x):
        x = x.requires_grad_(True)
        u = self.net(x)
        du = torch.autograd.grad(u.sum(), x, create_graph=True)[0]
        d2u = torch.autograd.grad(du.sum(), x, create_graph=True)[0]
        aux = self.auxiliary_variables().reshape(2)
        source = aux[0] * torch.sin(x) + aux[1] * torch.cos(x)
        return d2u - source


def loss_grads(model, x, x_obs, u_obs):
    model.zero_grad()
    loss = model.pde_residual(x.clone()).pow(2).mean() + (model.net(x_obs) - u_obs).pow(2).mean()
    loss.backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 12)[:, None]
    x_obs = torch.tensor([[-0.5], [0.5]])
    u_obs = torch.sin(x_obs)
    buggy = PINN(as_tensor)
    fixed = PINN(as_tensor_fixed)
    fixed.load_state_dict(buggy.state_dict())
    g_bug = loss_grads(buggy, x, x_obs, u_obs)
    g_fix = loss_grads(fixed, x, x_obs, u_obs)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
