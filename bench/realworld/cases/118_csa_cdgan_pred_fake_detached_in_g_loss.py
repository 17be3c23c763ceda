# Thread: https://github.com/wangle53/CSA-CDGAN/issues/5
# Title: "The problem of the GAN implementation"
# Diagnosis from the thread: the change-detection GAN's training loop computes `pred_fake = netd(fake).detach()`
# and uses it for the generator's adversarial term, so that term carries no gradient and "the loss cannot update
# anything": the generator is trained by the L1 term alone, silently. (The author answered that D must not be
# updated by G's loss; detaching D's output is not how to achieve that: it also cuts the path to G. D's gradients
# from G's loss are cleared by optimizer_d.zero_grad() anyway.)
# Kept from the thread: netg on the concatenated image pair, netd, the BCE/L1 losses, err_g_total = G_WEIGHT * err_g
# + D_WEIGHT * err_d_fake, the D loss on fake.detach(), the G-then-D backward/step order with retain_graph.
# Added: tiny conv nets, random images, a config class, a driver comparing the generator's gradients with the fix
# (no .detach() on the generator's adversarial prediction).
import torch
import torch.nn as nn
import torch.optim as optim

torch.manual_seed(0)


class ct:
    LR = 2e-4
    G_WEIGHT = 200
    D_WEIGHT = 1
    ISIZE = 16


class NetG(nn.Module):
    def __init__(self, nc=6, ngf=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(nc, ngf, 4, 2, 1), nn.LeakyReLU(0.2))
        self.decoder = nn.Sequential(nn.ConvTranspose2d(ngf, 1, 4, 2, 1), nn.Sigmoid())

    def forward(self, x):
        return self.decoder(self.encoder(x))


class NetD(nn.Module):
    def __init__(self, ndf=8):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, ndf, 4, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(ndf, 1, 8, 1, 0))

    def forward(self, x):
        return torch.sigmoid(self.features(x)).view(-1)


def adversarial_prediction(netd, fake):
    return netd(fake).detach()


def adversarial_prediction_fixed(netd, fake):
    return netd(fake)


def train_step(netg, netd, optimizer_g, optimizer_d, x1, x2, gt, predict):
    l_con, l_bce = nn.L1Loss(), nn.BCELoss()
    x = torch.cat((x1, x2), 1)
    real_label = torch.ones(size=(x1.shape[0],), dtype=torch.float32)
    fake_label = torch.zeros(size=(x1.shape[0],), dtype=torch.float32)

    fake = netg(x)
    pred_real = netd(gt)
    pred_fake = predict(netd, fake)
    err_d_fake = l_bce(pred_fake, fake_label)
    err_g = l_con(fake, gt)
    err_g_total = ct.G_WEIGHT * err_g + ct.D_WEIGHT * err_d_fake

    pred_fake_ = netd(fake.detach())
    err_d_real = l_bce(pred_real, real_label)
    err_d_fake_ = l_bce(pred_fake_, fake_label)
    err_d_total = (err_d_real + err_d_fake_) * 0.5

    optimizer_g.zero_grad()
    err_g_total.backward(retain_graph=True)
    g_grads = [p.grad.clone() for p in netg.parameters()]
    optimizer_g.step()
    optimizer_d.zero_grad()
    err_d_total.backward()
    optimizer_d.step()
    return g_grads


def generator_grads(predict):
    torch.manual_seed(0)
    netg, netd = NetG(), NetD()
    optimizer_d = optim.Adam(netd.parameters(), lr=ct.LR, betas=(0.5, 0.999))
    optimizer_g = optim.Adam(netg.parameters(), lr=ct.LR, betas=(0.5, 0.999))
    gen = torch.Generator().manual_seed(1)
    x1, x2 = torch.rand(2, 3, ct.ISIZE, ct.ISIZE, generator=gen), torch.rand(2, 3, ct.ISIZE, ct.ISIZE, generator=gen)
    gt = (torch.rand(2, 1, ct.ISIZE, ct.ISIZE, generator=gen) > 0.5).float()
    return train_step(netg, netd, optimizer_g, optimizer_d, x1, x2, gt, predict)


if __name__ == "__main__":
    buggy = generator_grads(adversarial_prediction)
    fixed = generator_grads(adversarial_prediction_fixed)
    if not all(torch.allclose(a, b) for a, b in zip(buggy, fixed)):
        print("gradguard-case: gradients differ from the fix")
