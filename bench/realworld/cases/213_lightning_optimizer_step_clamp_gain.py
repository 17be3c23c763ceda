# Source: https://github.com/open-retina/open-retina/pull/180
# Title: "Spatial Contrast (SC) model implementation" (review thread on optimizer_step)
# Diagnosis from the thread: the LightningModule overrides optimizer_step to keep the nonlinearity's gain
# non-negative and clamps the parameter with `self.nonlinearity.w.clamp_(min=0.0)` right after
# optimizer.step(); that is an in-place op on a leaf that requires grad, so autograd raises. The reviewer's
# workaround is `self.nonlinearity.w.data.clamp_(min=0.0)` (equivalently, clamp under torch.no_grad()).
# Kept from the thread: a spatial-contrast style retina model (centre/surround pooling, a parametrised
# nonlinearity with gain w), a Lightning-style module whose optimizer_step(epoch, batch_idx, optimizer,
# optimizer_closure) calls optimizer.step(closure=...) then clamps. Added: a minimal trainer loop standing in
# for Lightning (no lightning import), data shapes, a Poisson loss.
import torch
import torch.nn as nn
import torch.nn.functional as F


class GainNonlinearity(nn.Module):
    def __init__(self, n_neurons):
        super().__init__()
        self.w = nn.Parameter(torch.ones(n_neurons))
        self.b = nn.Parameter(torch.zeros(n_neurons))

    def forward(self, x):
        return self.w * F.softplus(x + self.b)


class SpatialContrastModel(nn.Module):
    def __init__(self, n_neurons, size=8):
        super().__init__()
        self.center = nn.Parameter(torch.randn(n_neurons, size * size) * 0.1)
        self.surround = nn.Parameter(torch.randn(n_neurons, size * size) * 0.1)
        self.nonlinearity = GainNonlinearity(n_neurons)

    def forward(self, frames):
        flat = frames.flatten(1)
        mean_lum = flat @ self.center.T
        contrast = ((flat - flat.mean(dim=1, keepdim=True)) ** 2) @ self.surround.abs().T
        return self.nonlinearity(mean_lum + contrast)


class SpatialContrastModule(nn.Module):
    """The parts of the LightningModule that matter here."""

    def __init__(self, n_neurons):
        super().__init__()
        self.model = SpatialContrastModel(n_neurons)
        self.nonlinearity = self.model.nonlinearity

    def training_step(self, batch, batch_idx):
        frames, targets = batch
        model_output = self(frames)
        return F.poisson_nll_loss(model_output, targets, log_input=False)

    def forward(self, frames):
        return self.model(frames)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        """Override implementation to allow parameter clamping at each training step"""
        optimizer.step(closure=optimizer_closure)
        # To avoid negative model predictions, clamp the gain parameter in the nonlinearity
        self.nonlinearity.w.clamp_(min=0.0)


def fit(module, batches, epochs=1):
    optimizer = module.configure_optimizers()
    for epoch in range(epochs):
        for batch_idx, batch in enumerate(batches):
            def closure():
                optimizer.zero_grad()
                loss = module.training_step(batch, batch_idx)
                loss.backward()
                return loss
            module.optimizer_step(epoch, batch_idx, optimizer, optimizer_closure=closure)


if __name__ == "__main__":
    torch.manual_seed(0)
    module = SpatialContrastModule(n_neurons=3)
    batches = [(torch.rand(4, 8, 8), torch.poisson(torch.ones(4, 3))) for _ in range(2)]
    fit(module, batches)
    print("ok")
