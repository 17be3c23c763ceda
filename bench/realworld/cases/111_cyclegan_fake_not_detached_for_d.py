# Thread: https://github.com/cy-xu/simple_CycleGAN/issues/3
# Title: "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation"
# Diagnosis from the thread: with torch >= 1.5 the simple CycleGAN loop fails at the discriminator's backward with
# a generator weight "[3, 64, 7, 7] is at version 3; expected version 1": the X->Y and Y->X cycles each end with
# optimizer_g.step(), and the discriminators are then trained on fake_y / fake_x that are still attached to the
# generators' graph, so their backward reaches generator weights the two steps rewrote (the thread points to the
# same diagnosis as pytorch#39141: parameters updated in place while still needed). Fix: score the fakes detached
# in the discriminator losses.
# Kept from the thread: two generators sharing one optimizer_g, two discriminators sharing optimizer_d, the X->Y
# and Y->X cycles with GAN + cycle + identity losses and retain_graph, then netD_x / netD_y on real and fake.
# Added: tiny conv nets (7x7 head and tail as in the ResNet generator), random images, one iteration.
import itertools

import torch
import torch.nn as nn

torch.manual_seed(0)


class ResnetGenerator(nn.Module):
    def __init__(self, ngf=8):
        super().__init__()
        self.model = nn.Sequential(
            nn.ReflectionPad2d(3), nn.Conv2d(3, ngf, 7), nn.InstanceNorm2d(ngf), nn.ReLU(True),
            nn.Conv2d(ngf, ngf, 3, padding=1), nn.InstanceNorm2d(ngf), nn.ReLU(True),
            nn.ReflectionPad2d(3), nn.Conv2d(ngf, 3, 7), nn.Tanh(),
        )

    def forward(self, x):
        return self.model(x)


class NLayerDiscriminator(nn.Module):
    def __init__(self, ndf=8):
        super().__init__()
        self.model = nn.Sequential(nn.Conv2d(3, ndf, 4, 2, 1), nn.LeakyReLU(0.2, True), nn.Conv2d(ndf, 1, 4, 1, 1))

    def forward(self, x):
        return self.model(x)


class GANLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss = nn.MSELoss()

    def __call__(self, prediction, target_is_real):
        target = torch.ones_like(prediction) if target_is_real else torch.zeros_like(prediction)
        return self.loss(prediction, target)


def train_iteration(netG_x, netG_y, netD_x, netD_y, optimizer_g, optimizer_d, real_x, real_y,
                    lambda_X=10.0, lambda_Y=10.0, lambda_identity=0.5):
    criterionGAN, criterionCycle, criterionIdt = GANLoss(), nn.L1Loss(), nn.L1Loss()

    # X -> Y' -> X^ cycle
    optimizer_g.zero_grad()
    fake_y = netG_x(real_x)
    loss_G_X = criterionGAN(netD_x(fake_y), True)
    x_hat = netG_y(fake_y)
    loss_cycle_X = criterionCycle(x_hat, real_x) * lambda_X
    loss_idt_x = criterionIdt(netG_x(real_y), real_y) * lambda_Y * lambda_identity
    loss_X = loss_G_X + loss_cycle_X + loss_idt_x
    loss_X.backward(retain_graph=True)
    optimizer_g.step()

    # Y -> X' -> Y^ cycle
    optimizer_g.zero_grad()
    fake_x = netG_y(real_y)
    loss_G_Y = criterionGAN(netD_y(fake_x), True)
    y_hat = netG_x(fake_x)
    loss_cycle_Y = criterionCycle(y_hat, real_y) * lambda_Y
    loss_idt_y = criterionIdt(netG_y(real_x), real_x) * lambda_X * lambda_identity
    loss_Y = loss_G_Y + loss_cycle_Y + loss_idt_y
    loss_Y.backward(retain_graph=True)
    optimizer_g.step()

    # netD_x
    optimizer_d.zero_grad()
    loss_D_x_real = criterionGAN(netD_x(real_y), True)
    pred_fake = netD_x(fake_y)
    loss_D_x_fake = criterionGAN(pred_fake, False)
    loss_D_x = (loss_D_x_real + loss_D_x_fake) * 0.5
    loss_D_x.backward()
    optimizer_d.step()

    # netD_y
    optimizer_d.zero_grad()
    loss_D_y_real = criterionGAN(netD_y(real_x), True)
    pred_fake = netD_y(fake_x)
    loss_D_y_fake = criterionGAN(pred_fake, False)
    loss_D_y = (loss_D_y_real + loss_D_y_fake) * 0.5
    loss_D_y.backward()
    optimizer_d.step()
    return loss_X.item(), loss_Y.item(), loss_D_x.item(), loss_D_y.item()


if __name__ == "__main__":
    netG_x, netG_y = ResnetGenerator(), ResnetGenerator()
    netD_x, netD_y = NLayerDiscriminator(), NLayerDiscriminator()
    optimizer_g = torch.optim.Adam(itertools.chain(netG_x.parameters(), netG_y.parameters()), lr=2e-4)
    optimizer_d = torch.optim.Adam(itertools.chain(netD_x.parameters(), netD_y.parameters()), lr=2e-4)
    print(train_iteration(netG_x, netG_y, netD_x, netD_y, optimizer_g, optimizer_d,
                          torch.rand(1, 3, 16, 16) * 2 - 1, torch.rand(1, 3, 16, 16) * 2 - 1))
