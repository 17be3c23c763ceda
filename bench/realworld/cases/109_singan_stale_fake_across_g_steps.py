# Thread: https://github.com/tamarott/SinGAN/issues/148
# Title: "Possible one-line solution for Runtime error (variables modified in-place)"
# Diagnosis from the thread: train_single_scale() has a loop of D steps that ends by generating `fake`, then a loop
# of G steps that all score that same `fake`; after the first G step optimizerG.step() rewrites netG's weights in
# place, and the second errG.backward() goes back through the old fake's graph, which saved those weights. The
# proposed one-line fix: generate a new fake from netG at the top of each G step.
# Kept from the thread: the two step loops (Dsteps with WGAN-GP, Gsteps with adversarial + reconstruction loss),
# ConvBlock (conv, batch norm, LeakyReLU(inplace=True)), the generator adding its output to the upsampled previous
# image, retain_graph on the backward calls. Added: a single scale, tiny sizes, fixed noise, one epoch.
import torch
import torch.nn as nn
import torch.optim as optim
from types import SimpleNamespace

torch.manual_seed(0)


class ConvBlock(nn.Sequential):
    def __init__(self, in_channel, out_channel, ker_size, padd, stride):
        super().__init__()
        self.add_module("conv", nn.Conv2d(in_channel, out_channel, kernel_size=ker_size, stride=stride, padding=padd))
        self.add_module("norm", nn.BatchNorm2d(out_channel))
        self.add_module("LeakyRelu", nn.LeakyReLU(0.2, inplace=True))


class WDiscriminator(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.head = ConvBlock(opt.nc_im, opt.nfc, 3, 1, 1)
        self.body = ConvBlock(opt.nfc, opt.nfc, 3, 1, 1)
        self.tail = nn.Conv2d(opt.nfc, 1, kernel_size=3, stride=1, padding=1)

    def forward(self, x):
        return self.tail(self.body(self.head(x)))


class GeneratorConcatSkip2CleanAdd(nn.Module):
    def __init__(self, opt):
        super().__init__()
        self.head = ConvBlock(opt.nc_im, opt.nfc, 3, 1, 1)
        self.body = ConvBlock(opt.nfc, opt.nfc, 3, 1, 1)
        self.tail = nn.Sequential(nn.Conv2d(opt.nfc, opt.nc_im, kernel_size=3, stride=1, padding=1), nn.Tanh())

    def forward(self, x, y):
        x = self.tail(self.body(self.head(x)))
        return x + y


def calc_gradient_penalty(netD, real_data, fake_data, LAMBDA):
    alpha = torch.rand(1, 1).expand(real_data.size())
    interpolates = (alpha * real_data + (1 - alpha) * fake_data).requires_grad_(True)
    disc_interpolates = netD(interpolates)
    gradients = torch.autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                                    grad_outputs=torch.ones(disc_interpolates.size()),
                                    create_graph=True, retain_graph=True, only_inputs=True)[0]
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean() * LAMBDA


def train_single_scale(netD, netG, real, opt):
    optimizerD = optim.Adam(netD.parameters(), lr=opt.lr_d, betas=(opt.beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=opt.lr_g, betas=(opt.beta1, 0.999))
    z_opt = torch.randn_like(real)
    prev = torch.zeros_like(real)
    for epoch in range(opt.niter):
        noise = torch.randn_like(real) * opt.noise_amp + prev

        for j in range(opt.Dsteps):
            netD.zero_grad()
            output = netD(real)
            errD_real = -output.mean()
            errD_real.backward(retain_graph=True)

            fake = netG(noise.detach(), prev)
            output = netD(fake.detach())
            errD_fake = output.mean()
            errD_fake.backward(retain_graph=True)

            gradient_penalty = calc_gradient_penalty(netD, real, fake.detach(), opt.lambda_grad)
            gradient_penalty.backward()
            optimizerD.step()

        for j in range(opt.Gsteps):
            netG.zero_grad()
            output = netD(fake)
            errG = -output.mean()
            errG.backward(retain_graph=True)
            rec_loss = opt.alpha * nn.MSELoss()(netG(z_opt.detach(), prev), real)
            rec_loss.backward(retain_graph=True)
            optimizerG.step()
        print(f"epoch {epoch}: errD {errD_real.item() + errD_fake.item():.4f} errG {errG.item():.4f}")


if __name__ == "__main__":
    opt = SimpleNamespace(nc_im=3, nfc=8, lr_d=5e-4, lr_g=5e-4, beta1=0.5, niter=1, Dsteps=3, Gsteps=3,
                          lambda_grad=0.1, alpha=10.0, noise_amp=0.1)
    real = torch.rand(1, 3, 12, 12) * 2 - 1
    train_single_scale(WDiscriminator(opt), GeneratorConcatSkip2CleanAdd(opt), real, opt)
