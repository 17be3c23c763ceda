# Thread: https://github.com/samet-akcay/skip-ganomaly/issues/5
# Title: "latent loss backward problem"
# Diagnosis from the thread: the generator's loss adds the latent (feature-matching) term err_g_lat, but the
# discriminator features it compares were computed on the detached fake image, so "it makes no contribution to update
# the parameters of the generator" (a second user confirmed the question): the term trains nothing and nothing raises.
# Kept from the thread's model: the Skip-GANomaly class with forward_g (netg on input + noise), forward_d (netd
# returning (prediction, features) for real and fake), backward_g (w_adv * adversarial + w_con * contextual L1 +
# w_lat * latent L2 between fake and real features), backward_d, update_netg/update_netd, optimize_params. The
# adversarial term here scores the undetached fake, so only the latent term is affected. Added: tiny U-Net-less
# encoder/decoder nets, random 16x16 images, options as a SimpleNamespace, a driver comparing the generator's
# gradients with the fix (latent features of the undetached fake).
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.optim as optim

torch.manual_seed(0)


class NetG(nn.Module):
    def __init__(self, nc=3, ngf=8):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(nc, ngf, 4, 2, 1), nn.LeakyReLU(0.2),
                                 nn.ConvTranspose2d(ngf, nc, 4, 2, 1), nn.Tanh())

    def forward(self, x):
        return self.net(x)


class NetD(nn.Module):
    def __init__(self, nc=3, ndf=8):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(nc, ndf, 4, 2, 1), nn.LeakyReLU(0.2))
        self.classifier = nn.Sequential(nn.Conv2d(ndf, 1, 8, 1, 0), nn.Sigmoid())

    def forward(self, x):
        features = self.features(x)
        return self.classifier(features).view(-1), features


def l2_loss(input, target):
    return torch.mean(torch.pow((input - target), 2))


class Skipganomaly:
    def __init__(self, opt):
        self.opt = opt
        self.netg, self.netd = NetG(), NetD()
        self.l_adv, self.l_con, self.l_lat = nn.BCELoss(), nn.L1Loss(), l2_loss
        self.optimizer_d = optim.Adam(self.netd.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
        self.optimizer_g = optim.Adam(self.netg.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))

    def set_input(self, data, noise):
        self.input, self.noise = data, noise
        self.real_label = torch.ones(data.size(0))
        self.fake_label = torch.zeros(data.size(0))

    def forward_g(self):
        self.fake = self.netg(self.input + self.noise)

    def forward_d(self):
        self.pred_real, self.feat_real = self.netd(self.input)
        self.pred_fake, self.feat_fake = self.netd(self.fake.detach())

    def latent_features_of_fake(self):
        return self.feat_fake

    def backward_g(self):
        pred_fake_g, _ = self.netd(self.fake)
        self.err_g_adv = self.opt.w_adv * self.l_adv(pred_fake_g, self.real_label)
        self.err_g_con = self.opt.w_con * self.l_con(self.fake, self.input)
        self.err_g_lat = self.opt.w_lat * self.l_lat(self.latent_features_of_fake(), self.feat_real)
        self.err_g = self.err_g_adv + self.err_g_con + self.err_g_lat
        self.err_g.backward(retain_graph=True)

    def backward_d(self):
        self.err_d_fake = self.l_adv(self.pred_fake, self.fake_label)
        self.err_d_real = self.l_adv(self.pred_real, self.real_label)
        self.err_d = self.err_d_real + self.err_d_fake
        self.err_d.backward()

    def update_netg(self):
        self.optimizer_g.zero_grad()
        self.backward_g()
        grads = [p.grad.clone() for p in self.netg.parameters()]
        self.optimizer_g.step()
        return grads

    def update_netd(self):
        self.optimizer_d.zero_grad()
        self.backward_d()
        self.optimizer_d.step()

    def optimize_params(self):
        self.forward_g()
        self.forward_d()
        grads = self.update_netg()
        self.update_netd()
        return grads


class SkipganomalyFixed(Skipganomaly):
    def latent_features_of_fake(self):
        return self.netd(self.fake)[1]


def generator_grads(model_cls):
    torch.manual_seed(0)
    model = model_cls(SimpleNamespace(lr=2e-4, beta1=0.5, w_adv=1.0, w_con=50.0, w_lat=1.0))
    gen = torch.Generator().manual_seed(1)
    data = torch.rand(2, 3, 16, 16, generator=gen) * 2 - 1
    model.set_input(data, torch.randn(2, 3, 16, 16, generator=gen) * 0.01)
    return model.optimize_params()


if __name__ == "__main__":
    buggy = generator_grads(Skipganomaly)
    fixed = generator_grads(SkipganomalyFixed)
    if not all(torch.allclose(a, b) for a, b in zip(buggy, fixed)):
        print("gradguard-case: gradients differ from the fix")
