# Part of case 137 (see main.py for the thread and diagnosis): the adversarial loss and the model holding both
# networks and their optimisers.
import torch
import torch.nn as nn
import torch.optim as optim

from .networks import D_Net, G_Net


class AdversarialLoss(nn.Module):
    def __init__(self, type="nsgan", target_real_label=1.0, target_fake_label=0.0):
        super().__init__()
        self.register_buffer("real_label", torch.tensor(target_real_label))
        self.register_buffer("fake_label", torch.tensor(target_fake_label))
        self.criterion = nn.BCELoss()

    def __call__(self, outputs, is_real, is_disc=None):
        labels = (self.real_label if is_real else self.fake_label).expand_as(outputs)
        return self.criterion(outputs, labels)


class InpaintingModel(nn.Module):
    def __init__(self, g_lr, d_lr, l1_weight, gan_weight):
        super().__init__()
        self.generator = G_Net(input_channels=3)
        self.discriminator = D_Net(in_channels=3, use_sigmoid=True)
        self.l1_loss = nn.L1Loss()
        self.adversarial_loss = AdversarialLoss("nsgan")
        self.l1_weight, self.gan_weight = l1_weight, gan_weight
        self.gen_optimizer = optim.Adam(self.generator.parameters(), lr=g_lr, betas=(0.0, 0.9))
        self.dis_optimizer = optim.Adam(self.discriminator.parameters(), lr=d_lr, betas=(0.0, 0.9))
