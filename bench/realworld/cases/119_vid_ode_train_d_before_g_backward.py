# Thread: https://github.com/psh01087/Vid-ODE/issues/6
# Title: "Inplace Operation Error"
# Diagnosis from the thread: Vid-ODE's train() computes the discriminators' and the generator's adversarial losses
# from the same forward pass and then runs "Train D" (zero_grad, loss_netD.backward(), optimizer_netD.step())
# before "Train G"; on newer torch loss_netG.backward() fails because the D step changed weights that the
# generator's adversarial loss still needs. The answer that worked for two users: swap the order, train G first and
# then D.
# Kept from the thread: the model computing a reconstruction loss through an ODE-style latent rollout, an image
# discriminator and a sequence discriminator, compute_adversarial_losses() returning (loss_netD, loss_netG) from one
# forward, the Train D / Train G blocks with one optimiser each. Added: tiny encoder/decoder, Euler steps for the
# latent ODE, random videos, one iteration.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class ODEFunc(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim), nn.Tanh(), nn.Linear(dim, dim))

    def forward(self, t, h):
        return self.net(h)


class VidODE(nn.Module):
    def __init__(self, frame_dim=12, latent=8):
        super().__init__()
        self.encoder = nn.Linear(frame_dim, latent)
        self.ode_func = ODEFunc(latent)
        self.decoder = nn.Linear(latent, frame_dim)

    def forward(self, video, n_future, dt=0.1):
        h = torch.tanh(self.encoder(video[:, -1]))
        frames = []
        for step in range(n_future):
            h = h + dt * self.ode_func(step * dt, h)
            frames.append(torch.tanh(self.decoder(h)))
        return torch.stack(frames, dim=1)


class ImageDiscriminator(nn.Module):
    def __init__(self, frame_dim=12):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(frame_dim, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def forward(self, frames):
        return self.net(frames.reshape(-1, frames.shape[-1]))


class SequenceDiscriminator(nn.Module):
    def __init__(self, frame_dim=12, steps=3):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(frame_dim * steps, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def forward(self, video):
        return self.net(video.flatten(1))


def compute_adversarial_losses(netD_img, netD_seq, real, fake):
    real_img, fake_img = netD_img(real), netD_img(fake.detach())
    real_seq, fake_seq = netD_seq(real), netD_seq(fake.detach())
    loss_netD = (F.softplus(-real_img).mean() + F.softplus(fake_img).mean()
                 + F.softplus(-real_seq).mean() + F.softplus(fake_seq).mean())
    loss_netG = F.softplus(-netD_img(fake)).mean() + F.softplus(-netD_seq(fake)).mean()
    return loss_netD, loss_netG


def train(model, netD_img, netD_seq, optimizer_netG, optimizer_netD, batch, n_past=2, n_future=3):
    past, future = batch[:, :n_past], batch[:, n_past:n_past + n_future]
    pred = model(past, n_future)
    loss_recon = F.mse_loss(pred, future)
    loss_netD, loss_adv_G = compute_adversarial_losses(netD_img, netD_seq, future, pred)
    loss_netG = loss_recon + 0.01 * loss_adv_G

    # Train D
    optimizer_netD.zero_grad()
    loss_netD.backward()
    optimizer_netD.step()

    # Train G
    optimizer_netG.zero_grad()
    loss_netG.backward()
    optimizer_netG.step()
    return loss_netD.item(), loss_netG.item()


if __name__ == "__main__":
    model, netD_img, netD_seq = VidODE(), ImageDiscriminator(), SequenceDiscriminator()
    optimizer_netG = torch.optim.Adamax(model.parameters(), lr=1e-3)
    optimizer_netD = torch.optim.Adamax(list(netD_img.parameters()) + list(netD_seq.parameters()), lr=1e-3)
    print(train(model, netD_img, netD_seq, optimizer_netG, optimizer_netD, torch.rand(4, 5, 12) * 2 - 1))
