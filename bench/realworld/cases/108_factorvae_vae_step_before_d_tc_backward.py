# Thread: https://github.com/1Konny/FactorVAE/issues/15
# Title: "Inplace problem when calling D_tc_loss.backward()"
# Diagnosis from the thread: D_z = D(z) is computed in the VAE stage and reused in the discriminator's total-
# correlation loss; between the two, vae_loss.backward(retain_graph=True) and optim_VAE.step() update the encoder
# in place, so D_tc_loss.backward() (which flows through D_z into z and the encoder) finds the encoder weights
# changed ("output 0 of TBackward, is at version 2; expected version 1"). Detaching the VAE side of D_z in the
# discriminator's loss (the reporter detached D_z; a later comment points at the VAE optimizer step) removes it.
# Kept from the thread: the Solver.train() loop with two batches, the VAE returning (x_recon, mu, logvar, z),
# recon + KLD + gamma * TC loss, permute_dims, the discriminator's cross-entropy TC loss reusing D_z, two Adam
# optimisers. Added: MLP encoder/decoder instead of convolutions, sizes, random data, one iteration.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class FactorVAE(nn.Module):
    def __init__(self, z_dim=4, x_dim=20):
        super().__init__()
        self.z_dim = z_dim
        self.encode = nn.Sequential(nn.Linear(x_dim, 32), nn.ReLU(), nn.Linear(32, 2 * z_dim))
        self.decode = nn.Sequential(nn.Linear(z_dim, 32), nn.ReLU(), nn.Linear(32, x_dim))

    def reparametrize(self, mu, logvar):
        std = logvar.mul(0.5).exp_()
        eps = std.data.new(std.size()).normal_()
        return eps.mul(std).add_(mu)

    def forward(self, x, no_dec=False):
        stats = self.encode(x)
        mu, logvar = stats[:, :self.z_dim], stats[:, self.z_dim:]
        z = self.reparametrize(mu, logvar)
        if no_dec:
            return z.squeeze()
        return self.decode(z), mu, logvar, z.squeeze()


class Discriminator(nn.Module):
    def __init__(self, z_dim=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(z_dim, 32), nn.LeakyReLU(0.2), nn.Linear(32, 32), nn.LeakyReLU(0.2),
                                 nn.Linear(32, 2))

    def forward(self, z):
        return self.net(z).squeeze()


def recon_loss(x, x_recon):
    return F.mse_loss(x_recon, x, reduction="sum").div(x.size(0))


def kl_divergence(mu, logvar):
    return 0.5 * (-1 - logvar + mu.pow(2) + logvar.exp()).sum(1).mean()


def permute_dims(z):
    B, _ = z.size()
    perm_z = []
    for z_j in z.split(1, 1):
        perm = torch.randperm(B)
        perm_z.append(z_j[perm])
    return torch.cat(perm_z, 1)


class Solver:
    def __init__(self, gamma=6.4):
        self.VAE, self.D = FactorVAE(), Discriminator()
        self.optim_VAE = torch.optim.Adam(self.VAE.parameters(), lr=1e-4, betas=(0.9, 0.999))
        self.optim_D = torch.optim.Adam(self.D.parameters(), lr=1e-4, betas=(0.5, 0.9))
        self.gamma = gamma

    def train_step(self, x_true1, x_true2):
        ones = torch.ones(x_true1.size(0), dtype=torch.long)
        zeros = torch.zeros(x_true1.size(0), dtype=torch.long)

        x_recon, mu, logvar, z = self.VAE(x_true1)
        vae_recon_loss = recon_loss(x_true1, x_recon)
        vae_kld = kl_divergence(mu, logvar)
        D_z = self.D(z)
        vae_tc_loss = (D_z[:, :1] - D_z[:, 1:]).mean()
        vae_loss = vae_recon_loss + vae_kld + self.gamma * vae_tc_loss

        self.optim_VAE.zero_grad()
        vae_loss.backward(retain_graph=True)
        self.optim_VAE.step()

        z_prime = self.VAE(x_true2, no_dec=True)
        z_pperm = permute_dims(z_prime).detach()
        D_z_pperm = self.D(z_pperm)
        D_tc_loss = 0.5 * (F.cross_entropy(D_z, zeros) + F.cross_entropy(D_z_pperm, ones))

        self.optim_D.zero_grad()
        D_tc_loss.backward()
        self.optim_D.step()
        return vae_loss.item(), D_tc_loss.item()


if __name__ == "__main__":
    solver = Solver()
    print(solver.train_step(torch.randn(8, 20), torch.randn(8, 20)))
