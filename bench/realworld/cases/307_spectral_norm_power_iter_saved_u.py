# Source: https://github.com/pytorch/pytorch/pull/62293
# Title: "Do not modify saved variables in-place for spectral norm during power iteration"
# Thread: the spectral-norm parametrization updates its `u`/`v` vectors in place (normalize with
# out=) during power iteration and then uses them to compute sigma, which saves them for backward.
# Running the module a second time before backward (two forwards, e.g. real and fake batches through
# one discriminator) modifies the saved vectors in place and backward fails. The fix clones the
# vectors BEFORE the in-place update (cloning after it, as the old code did, does not help).
# Kept: buffers `_u`/`_v` updated in place by F.normalize(..., out=...) under no_grad, sigma computed
# from them with vdot/mv, two forwards then one backward. Added: the hand-written module around it,
# a small GAN discriminator and hinge-loss driver.
import torch
import torch.nn as nn
import torch.nn.functional as F


class SpectralNormConvWeight(nn.Module):
    def __init__(self, weight_shape, n_power_iterations=1, eps=1e-12):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(*weight_shape) * 0.3)
        h = weight_shape[0]
        w = int(torch.tensor(weight_shape[1:]).prod())
        self.register_buffer("_u", F.normalize(torch.randn(h), dim=0))
        self.register_buffer("_v", F.normalize(torch.randn(w), dim=0))
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    @torch.no_grad()
    def _power_method(self, weight_mat):
        for _ in range(self.n_power_iterations):
            F.normalize(torch.mv(weight_mat, self._v), dim=0, eps=self.eps, out=self._u)
            F.normalize(torch.mv(weight_mat.t(), self._u), dim=0, eps=self.eps, out=self._v)

    def forward(self):
        weight_mat = self.weight.flatten(1)
        if self.training:
            self._power_method(weight_mat)
        u, v = self._u, self._v
        sigma = torch.vdot(u, torch.mv(weight_mat, v))
        return self.weight / sigma


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_w = SpectralNormConvWeight((8, 3, 3, 3))
        self.head = nn.Linear(8, 1)

    def forward(self, img):
        h = F.leaky_relu(F.conv2d(img, self.conv_w(), padding=1), 0.2)
        return self.head(h.mean(dim=(2, 3)))


if __name__ == "__main__":
    torch.manual_seed(0)
    disc = Discriminator()
    opt = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.0, 0.9))
    real, fake = torch.randn(4, 3, 8, 8), torch.randn(4, 3, 8, 8)
    opt.zero_grad()
    d_real = disc(real)
    d_fake = disc(fake)
    loss = F.relu(1.0 - d_real).mean() + F.relu(1.0 + d_fake).mean()
    loss.backward()
    opt.step()
