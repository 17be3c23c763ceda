# Thread: https://github.com/leftthomas/SRGAN/issues/74
# Title: "Runtimeerror when running train.py"
# Diagnosis from the thread: with torch 1.5 SRGAN's train.py fails at g_loss.backward() with "[1, 1024, 1, 1] is at
# version 2; expected version 1" (the discriminator's last 1x1 conv weight): the generator loss is built from
# fake_out = netD(fake_img).mean() computed before optimizerD.step() updated netD. The fix posted in the thread adds two
# lines in the G update that recompute fake_img = netG(z) and fake_out = netD(fake_img).mean() before the generator
# loss (which is why the repository later computes them twice, see its issue #101).
# Kept from the thread: the (1) update D / (2) update G blocks of train.py, d_loss = 1 - real_out + fake_out with
# retain_graph, GeneratorLoss (adversarial 1 - D(G(z)), perception loss on frozen VGG-like features, image MSE, TV
# loss), the discriminator ending in AdaptiveAvgPool2d + 1x1 convs to 1024 and to 1. Added: tiny networks, a frozen
# 2-layer conv stand-in for VGG16 features, random 8x8 LR / 16x16 HR patches, one batch.
import torch
import torch.nn as nn
import torch.optim as optim

torch.manual_seed(0)


class Generator(nn.Module):
    def __init__(self, scale_factor=2, ch=8):
        super().__init__()
        self.block1 = nn.Sequential(nn.Conv2d(3, ch, 9, padding=4), nn.PReLU())
        self.block2 = nn.Sequential(nn.Conv2d(ch, ch, 3, padding=1), nn.BatchNorm2d(ch), nn.PReLU())
        self.upsample = nn.Sequential(nn.Conv2d(ch, ch * scale_factor ** 2, 3, padding=1),
                                      nn.PixelShuffle(scale_factor), nn.PReLU())
        self.block_out = nn.Conv2d(ch, 3, 9, padding=4)

    def forward(self, x):
        b1 = self.block1(x)
        b2 = self.block2(b1)
        return (torch.tanh(self.block_out(self.upsample(b1 + b2))) + 1) / 2


class Discriminator(nn.Module):
    def __init__(self, ch=8):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, ch, 3, padding=1), nn.LeakyReLU(0.2),
            nn.Conv2d(ch, ch, 3, stride=2, padding=1), nn.BatchNorm2d(ch), nn.LeakyReLU(0.2),
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(ch, 1024, kernel_size=1), nn.LeakyReLU(0.2),
            nn.Conv2d(1024, 1, kernel_size=1))

    def forward(self, x):
        return torch.sigmoid(self.net(x).view(x.size(0)))


class TVLoss(nn.Module):
    def forward(self, x):
        h_tv = torch.pow(x[:, :, 1:, :] - x[:, :, :-1, :], 2).sum()
        w_tv = torch.pow(x[:, :, :, 1:] - x[:, :, :, :-1], 2).sum()
        return 2 * (h_tv + w_tv) / x.size(0)


class GeneratorLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss_network = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1)).eval()
        for param in self.loss_network.parameters():
            param.requires_grad = False
        self.mse_loss, self.tv_loss = nn.MSELoss(), TVLoss()

    def forward(self, out_labels, out_images, target_images):
        adversarial_loss = torch.mean(1 - out_labels)
        perception_loss = self.mse_loss(self.loss_network(out_images), self.loss_network(target_images))
        image_loss = self.mse_loss(out_images, target_images)
        tv_loss = self.tv_loss(out_images)
        return image_loss + 0.001 * adversarial_loss + 0.006 * perception_loss + 2e-8 * tv_loss


def train_batch(netG, netD, generator_criterion, optimizerG, optimizerD, data, target):
    ############################
    # (1) Update D network: maximize D(x)-1-D(G(z))
    ###########################
    real_img, z = target, data
    fake_img = netG(z)
    netD.zero_grad()
    real_out = netD(real_img).mean()
    fake_out = netD(fake_img).mean()
    d_loss = 1 - real_out + fake_out
    d_loss.backward(retain_graph=True)
    optimizerD.step()

    ############################
    # (2) Update G network: minimize 1-D(G(z)) + Perception Loss + Image Loss + TV Loss
    ###########################
    netG.zero_grad()
    g_loss = generator_criterion(fake_out, fake_img, real_img)
    g_loss.backward()
    optimizerG.step()
    return d_loss.item(), g_loss.item()


if __name__ == "__main__":
    netG, netD = Generator(), Discriminator()
    optimizerG, optimizerD = optim.Adam(netG.parameters()), optim.Adam(netD.parameters())
    print(train_batch(netG, netD, GeneratorLoss(), optimizerG, optimizerD, torch.rand(2, 3, 8, 8), torch.rand(2, 3, 16, 16)))
