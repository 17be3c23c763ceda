# Thread: https://github.com/mperezcarrasco/PyTorch-BiGAN/issues/1
# Title: "code can not run"
# Diagnosis from the thread: TrainerBiGAN.train() runs the generator and the encoder once, scores both pairs
# with the joint discriminator D(x, z), builds the discriminator loss and the generator/encoder loss from the
# same two outputs, then calls loss_d.backward(retain_graph=True), optimizer_d.step(), and only then
# loss_ge.backward(). The D step rewrites the discriminator weights that the shared D forward saved, so the
# generator/encoder backward fails with "modified by an inplace operation". The reporter's fix: after the
# discriminator step, run the generator, the encoder and the discriminator forward again and build loss_ge from
# the fresh outputs.
# Kept: Generator (z -> x), Encoder (x -> z), Discriminator on the (x, z) pair with LeakyReLU and dropout, the
# decaying instance noise added to D's inputs, the BCE and Wasserstein (with weight clipping) loss branches,
# one optimizer for D and one for G and E together, and the update order as posted. Added: small MLP sizes,
# random data batches, an args namespace.
from types import SimpleNamespace

import torch
import torch.nn as nn

torch.manual_seed(0)


class Generator(nn.Module):
    def __init__(self, z_dim, x_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(z_dim, 64), nn.LeakyReLU(0.2), nn.Linear(64, x_dim), nn.Tanh())

    def forward(self, z):
        return self.net(z)


class Encoder(nn.Module):
    def __init__(self, x_dim, z_dim):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(x_dim, 64), nn.LeakyReLU(0.2), nn.Linear(64, z_dim))

    def forward(self, x):
        return self.net(x)


class Discriminator(nn.Module):
    def __init__(self, x_dim, z_dim, wasserstein=False):
        super().__init__()
        self.wasserstein = wasserstein
        self.x_branch = nn.Sequential(nn.Linear(x_dim, 64), nn.LeakyReLU(0.2), nn.Dropout(0.2))
        self.z_branch = nn.Sequential(nn.Linear(z_dim, 64), nn.LeakyReLU(0.2), nn.Dropout(0.2))
        self.joint = nn.Sequential(nn.Linear(128, 64), nn.LeakyReLU(0.2), nn.Dropout(0.2), nn.Linear(64, 1))

    def forward(self, x, z):
        out = self.joint(torch.cat([self.x_branch(x), self.z_branch(z)], dim=1))
        return out if self.wasserstein else torch.sigmoid(out)


class TrainerBiGAN:
    def __init__(self, args, data, device="cpu"):
        self.args, self.train_loader, self.device = args, data, device

    def train(self):
        args = self.args
        self.G = Generator(args.latent_dim, args.x_dim).to(self.device)
        self.E = Encoder(args.x_dim, args.latent_dim).to(self.device)
        self.D = Discriminator(args.x_dim, args.latent_dim, args.wasserstein).to(self.device)
        optimizer_ge = torch.optim.Adam(list(self.G.parameters()) + list(self.E.parameters()), lr=args.lr_adam)
        optimizer_d = torch.optim.Adam(self.D.parameters(), lr=args.lr_adam)
        criterion = nn.BCELoss()
        for epoch in range(args.num_epochs):
            ge_losses, d_losses = 0, 0
            for x in self.train_loader:
                y_true = torch.ones(x.size(0), 1)
                y_fake = torch.zeros(x.size(0), 1)
                noise1 = torch.randn_like(x) * 0.1 * (args.num_epochs - epoch) / args.num_epochs
                noise2 = torch.randn_like(x) * 0.1 * (args.num_epochs - epoch) / args.num_epochs

                optimizer_d.zero_grad()
                optimizer_ge.zero_grad()
                z_fake = torch.randn(x.size(0), args.latent_dim)
                x_fake = self.G(z_fake)
                x_true = x.float()
                z_true = self.E(x_true)
                out_true = self.D(x_true + noise1, z_true)
                out_fake = self.D(x_fake + noise2, z_fake)
                if args.wasserstein:
                    loss_d = -torch.mean(out_true) + torch.mean(out_fake)
                    loss_ge = -torch.mean(out_fake) + torch.mean(out_true)
                else:
                    loss_d = criterion(out_true, y_true) + criterion(out_fake, y_fake)
                    loss_ge = criterion(out_fake, y_true) + criterion(out_true, y_fake)

                loss_d.backward(retain_graph=True)
                optimizer_d.step()
                loss_ge.backward()
                optimizer_ge.step()
                if args.wasserstein:
                    for p in self.D.parameters():
                        p.data.clamp_(-args.clamp, args.clamp)
                ge_losses += loss_ge.item()
                d_losses += loss_d.item()
        return ge_losses, d_losses


if __name__ == "__main__":
    args = SimpleNamespace(latent_dim=8, x_dim=20, wasserstein=False, lr_adam=1e-4, num_epochs=2, clamp=0.01)
    loader = [torch.rand(16, 20) * 2 - 1 for _ in range(3)]
    print(TrainerBiGAN(args, loader).train())
