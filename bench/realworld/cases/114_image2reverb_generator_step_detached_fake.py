# Thread: https://github.com/nikhilsinghmus/image2reverb/issues/37
# Title: "Is fake_spec.detach() in Generator training step intentional?"
# Diagnosis from the thread: in the Lightning training_step, the generator/encoder branch (optimizer_idx 0 or 1)
# scores `self.d(fake_spec.detach(), f)`, so the adversarial term G_loss1 sends no gradient to the generator and only
# the L1 term trains it; no error is raised. The maintainer confirmed the .detach() should not be there for the
# generator step.
# Kept from the thread: the LightningModule-style class with enc / g / d, training_step(batch, batch_idx,
# optimizer_idx) computing f, z (features concatenated with noise), fake_spec, the conditional discriminator d(x, f),
# the LSGAN MSE losses, G_loss = G_loss1 + LAMBDA * G_loss2, configure_optimizers returning [enc, g, d]. Added: tiny
# conv nets, random spectrograms and labels, a minimal stand-in for the Lightning loop, and a driver comparing the
# generator's gradients with the fixed step (no detach).
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)

G_LR, D_LR, ENC_LR = 2e-4, 4e-4, 1e-5
ADAM_BETA = (0.0, 0.99)
LAMBDA = 100


class Encoder(nn.Module):
    def __init__(self, channels=4):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, channels, 3, 2, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))

    def forward(self, x):
        return (self.net(x),)


class Generator(nn.Module):
    def __init__(self, latent_dimension):
        super().__init__()
        self.net = nn.Sequential(nn.ConvTranspose2d(latent_dimension, 8, 4, 1, 0), nn.ReLU(),
                                 nn.ConvTranspose2d(8, 1, 4, 2, 1), nn.Tanh())

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self, label_channels=4):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 8, 4, 2, 1), nn.LeakyReLU(0.2), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(8 + label_channels, 1)

    def forward(self, x, f):
        return self.head(torch.cat([self.conv(x).flatten(1), f.flatten(1)], dim=1))


class Image2Reverb(nn.Module):
    def __init__(self, latent_dimension=8):
        super().__init__()
        self._latent_dimension = latent_dimension
        self.enc = Encoder()
        self.g = Generator(latent_dimension)
        self.d = Discriminator()

    def generator_scores(self, fake_spec, f):
        return self.d(fake_spec.detach(), f)

    def training_step(self, batch, batch_idx, optimizer_idx):
        spec, label = batch
        f = self.enc.forward(label)[0]
        noise = torch.randn(f.shape[0], self._latent_dimension - f.shape[1], f.shape[2], f.shape[3],
                            generator=torch.Generator().manual_seed(batch_idx))
        z = torch.cat((f, noise), 1)
        fake_spec = self.g(z)
        d_fake = self.d(fake_spec.detach(), f)
        d_real = self.d(spec, f)

        if optimizer_idx == 0 or optimizer_idx == 1:
            d_fake2 = self.generator_scores(fake_spec, f)
            G_loss1 = F.mse_loss(d_fake2, torch.ones(d_fake2.shape))
            G_loss2 = F.l1_loss(fake_spec, spec)
            return G_loss1 + (LAMBDA * G_loss2)
        l_fakeD = F.mse_loss(d_fake, torch.zeros(d_fake.shape))
        l_realD = F.mse_loss(d_real, torch.ones(d_real.shape))
        return l_realD + l_fakeD

    def configure_optimizers(self):
        g_optim = torch.optim.Adam(self.g.parameters(), lr=G_LR, betas=ADAM_BETA)
        d_optim = torch.optim.Adam(self.d.parameters(), lr=D_LR, betas=ADAM_BETA)
        enc_optim = torch.optim.Adam(self.enc.parameters(), lr=ENC_LR, betas=ADAM_BETA)
        return [enc_optim, g_optim, d_optim], []


class Image2ReverbFixed(Image2Reverb):
    def generator_scores(self, fake_spec, f):
        return self.d(fake_spec, f)


def generator_step_grads(model_cls):
    """What the Lightning loop does for optimizer_idx == 1 (the generator's optimiser)."""
    torch.manual_seed(0)
    model = model_cls()
    optimizers, _ = model.configure_optimizers()
    gen = torch.Generator().manual_seed(1)
    batch = (torch.rand(2, 1, 8, 8, generator=gen) * 2 - 1, torch.rand(2, 3, 8, 8, generator=gen))
    optimizers[1].zero_grad()
    loss = model.training_step(batch, batch_idx=0, optimizer_idx=1)
    loss.backward()
    return [p.grad.clone() for p in model.g.parameters()]


if __name__ == "__main__":
    buggy = generator_step_grads(Image2Reverb)
    fixed = generator_step_grads(Image2ReverbFixed)
    if not all(torch.allclose(a, b) for a, b in zip(buggy, fixed)):
        print("gradguard-case: gradients differ from the fix")
