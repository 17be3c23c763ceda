# Thread: https://github.com/dreamgonfly/GAN-tutorial/issues/1
# Title: "Train Backward 과정에서 오류" (error during the training backward)
# Diagnosis from the thread: the vanilla-GAN tutorial's D_loss.backward() raises "one of the variables needed for
# gradient computation has been modified by an inplace operation"; the answer: remove `inplace=True` from the
# LeakyReLU and Dropout layers of the Generator and Discriminator classes (an in-place LeakyReLU keeps its output
# for backward, and the in-place Dropout right after it overwrites that output).
# Kept from the thread: the MNIST MLP generator and discriminator built from Linear / LeakyReLU(0.2, inplace=True)
# / Dropout(inplace=True), BCELoss with real/fake labels, separate Adam optimisers, the D-then-G loop. Added: random
# "images" instead of MNIST, sizes, one iteration.
import torch
import torch.nn as nn

torch.manual_seed(0)


class Generator(nn.Module):
    def __init__(self, latent=16, out=64):
        super().__init__()
        self.main = nn.Sequential(
            nn.Linear(latent, 32),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(32, out),
            nn.Tanh(),
        )

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, inp=64):
        super().__init__()
        self.main = nn.Sequential(
            nn.Linear(inp, 32),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Dropout(inplace=True),
            nn.Linear(32, 16),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Dropout(inplace=True),
            nn.Linear(16, 1),
            nn.Sigmoid(),
        )

    def forward(self, x):
        return self.main(x)


def train_step(G, D, G_optimizer, D_optimizer, criterion, images, latent=16):
    batch = images.size(0)
    real_labels, fake_labels = torch.ones(batch, 1), torch.zeros(batch, 1)

    D_optimizer.zero_grad()
    D_loss_real = criterion(D(images), real_labels)
    z = torch.randn(batch, latent)
    D_loss_fake = criterion(D(G(z).detach()), fake_labels)
    D_loss = D_loss_real + D_loss_fake
    D_loss.backward()
    D_optimizer.step()

    G_optimizer.zero_grad()
    z = torch.randn(batch, latent)
    G_loss = criterion(D(G(z)), real_labels)
    G_loss.backward()
    G_optimizer.step()
    return D_loss.item(), G_loss.item()


if __name__ == "__main__":
    G, D = Generator(), Discriminator()
    criterion = nn.BCELoss()
    G_optimizer = torch.optim.Adam(G.parameters(), lr=2e-4)
    D_optimizer = torch.optim.Adam(D.parameters(), lr=2e-4)
    print(train_step(G, D, G_optimizer, D_optimizer, criterion, torch.rand(8, 64) * 2 - 1))
