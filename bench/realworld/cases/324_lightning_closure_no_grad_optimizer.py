# Source: https://github.com/Lightning-AI/pytorch-lightning/issues/18222
# Title: "“element 0 of tensors does not require grad and does not have a grad_fn”"
# Thread: with Lightning's automatic optimization the training_step runs inside the closure that the
# trainer passes to optimizer.step(closure). The user's optimizer (not torch's) runs step() under
# no_grad and calls the closure without re-enabling grad, so the whole training_step, forward
# included, runs with grad disabled and backward fails. Maintainer's workaround: call
# `torch.set_grad_enabled(True)` at the start of training_step, or use torch's AdamW (whose step
# wraps the closure in torch.enable_grad()).
# Kept: a LightningModule-like class with training_step/configure_optimizers, automatic optimization
# through optimizer.step(closure) where the closure runs training_step + backward, and a third-party
# style AdamW whose @torch.no_grad() step calls closure() directly. Added: a minimal trainer loop, a
# small regression model and the optimizer update rule.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ThirdPartyAdamW(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                state["step"] += 1
                state["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                state["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                denom = (state["v"] / (1 - b2 ** state["step"])).sqrt().add_(group["eps"])
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.addcdiv_(state["m"], denom, value=-group["lr"] / (1 - b1 ** state["step"]))
        return loss


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.mse_loss(self(x), y)
        return {"loss": loss}

    def configure_optimizers(self):
        return ThirdPartyAdamW(self.parameters(), lr=1e-3)


class AutomaticOptimizationLoop:
    def __init__(self, module):
        self.module = module
        self.optimizer = module.configure_optimizers()

    def run(self, batches):
        for batch_idx, batch in enumerate(batches):
            def closure():
                self.optimizer.zero_grad()
                out = self.module.training_step(batch, batch_idx)
                out["loss"].backward()
                return out["loss"]

            self.optimizer.step(closure=closure)


if __name__ == "__main__":
    torch.manual_seed(0)
    batches = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(2)]
    AutomaticOptimizationLoop(Regressor()).run(batches)
