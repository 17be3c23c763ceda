# Thread: https://github.com/Adversarial-Deep-Learning/code-soup/pull/73
# Title: "bug fixed in gan.py"
# Diagnosis from the thread: the chapter-5 GAN class's step() trains the discriminator and then the generator
# with their own optimisers, but it never cleared the discriminator's gradients. Every discriminator update
# therefore stepped on the sum of the current D loss gradient, the previous iterations' D gradients and the
# gradients the generator's loss had pushed into D's parameters (G's loss backpropagates through D). The PR adds
# the missing discriminator zero_grad() (and makes step() also return the generator loss).
# Kept: the GAN wrapper (generator, discriminator, one optimiser each, BCE criterion, real/fake labels),
# step(real) = D update on real and detached fake, then G update through D, returning both losses. Added: small
# MLP nets on flattened 28x28 inputs, a random data batch, two steps, and the comparison of the discriminator
# gradients of the second step with the version that zeroes them first.
import torch
import torch.nn as nn

torch.manual_seed(0)


class Generator(nn.Module):
    def __init__(self, latent_dim=16, out_dim=784):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(latent_dim, 64), nn.LeakyReLU(0.2), nn.Linear(64, out_dim), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, in_dim=784):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(in_dim, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1), nn.Sigmoid())

    def forward(self, x):
        return self.main(x)


class GAN:
    def __init__(self, generator, discriminator, latent_dim=16, lr=2e-4, zero_d_grad=False):
        self.generator, self.discriminator = generator, discriminator
        self.latent_dim = latent_dim
        self.optimizerG = torch.optim.Adam(generator.parameters(), lr=lr, betas=(0.5, 0.999))
        self.optimizerD = torch.optim.Adam(discriminator.parameters(), lr=lr, betas=(0.5, 0.999))
        self.criterion = nn.BCELoss()
        self.real_label, self.fake_label = 1.0, 0.0
        self.zero_d_grad = zero_d_grad
        self.d_grads = None

    def step(self, real):
        batch_size = real.size(0)
        if self.zero_d_grad:
            self.discriminator.zero_grad()
        label = torch.full((batch_size, 1), self.real_label)
        errD_real = self.criterion(self.discriminator(real), label)
        errD_real.backward()
        noise = torch.randn(batch_size, self.latent_dim)
        fake = self.generator(noise)
        label.fill_(self.fake_label)
        errD_fake = self.criterion(self.discriminator(fake.detach()), label)
        errD_fake.backward()
        errD = errD_real + errD_fake
        self.d_grads = [p.grad.clone() for p in self.discriminator.parameters()]
        self.optimizerD.step()

        self.generator.zero_grad()
        label.fill_(self.real_label)
        errG = self.criterion(self.discriminator(fake), label)
        errG.backward()
        self.optimizerG.step()
        return errD.item(), errG.item()


def two_steps(zero_d_grad, g_state, d_state, batches):
    gen, disc = Generator(), Discriminator()
    gen.load_state_dict(g_state)
    disc.load_state_dict(d_state)
    gan = GAN(gen, disc, zero_d_grad=zero_d_grad)
    torch.manual_seed(1)
    for real in batches:
        gan.step(real)
    return gan.d_grads


if __name__ == "__main__":
    g_state, d_state = Generator().state_dict(), Discriminator().state_dict()
    batches = [torch.rand(8, 784) * 2 - 1 for _ in range(2)]
    g_bug = two_steps(False, g_state, d_state, batches)
    g_fix = two_steps(True, g_state, d_state, batches)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
