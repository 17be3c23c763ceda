# Thread: https://github.com/HsinYingLee/DRIT/issues/62
# Title: "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation"
# Diagnosis from the thread: DRIT's update_EG() backpropagates the encoders'/generator's loss, steps enc_c, enc_a and
# gen, and then calls backward_G_alone() on outputs of the same forward pass (the images generated from random
# attribute codes), whose graph holds generator weights the steps just rewrote. The answer that helped: update the
# function with a forward pass (re-run forward() before backward_G_alone()), as later forks of DRIT do.
# Kept from the thread: the DRIT model layout (content and attribute encoders, one generator, domain discriminators
# disA/disB and a content discriminator), forward() producing encoded and random-attribute fakes, update_D(),
# update_EG() with backward_EG() (content adversarial, GAN, KL, cross-cycle reconstruction) then backward_G_alone()
# (GAN on random fakes + latent regression). Added: MLP encoders/generator on flat "images", sizes, random data.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
IMG, CONTENT, ATTR = 24, 8, 4


def mlp(i, o):
    return nn.Sequential(nn.Linear(i, 16), nn.LeakyReLU(0.2), nn.Linear(16, o))


class DRIT(nn.Module):
    def __init__(self, lr=1e-4):
        super().__init__()
        self.enc_c = mlp(IMG, CONTENT)
        self.enc_a = mlp(IMG, 2 * ATTR)
        self.gen = mlp(CONTENT + ATTR, IMG)
        self.disA, self.disB, self.disContent = mlp(IMG, 1), mlp(IMG, 1), mlp(CONTENT, 1)
        self.enc_c_opt = torch.optim.Adam(self.enc_c.parameters(), lr=lr, betas=(0.5, 0.999))
        self.enc_a_opt = torch.optim.Adam(self.enc_a.parameters(), lr=lr, betas=(0.5, 0.999))
        self.gen_opt = torch.optim.Adam(self.gen.parameters(), lr=lr, betas=(0.5, 0.999))
        self.dis_opt = torch.optim.Adam(list(self.disA.parameters()) + list(self.disB.parameters())
                                        + list(self.disContent.parameters()), lr=lr, betas=(0.5, 0.999))

    def encode_attr(self, x):
        mu, logvar = self.enc_a(x).chunk(2, dim=1)
        return mu + torch.randn_like(mu) * logvar.mul(0.5).exp(), mu, logvar

    def forward(self):
        self.z_content_a, self.z_content_b = self.enc_c(self.input_A), self.enc_c(self.input_B)
        self.z_attr_a, self.mu_a, self.logvar_a = self.encode_attr(self.input_A)
        self.z_attr_b, self.mu_b, self.logvar_b = self.encode_attr(self.input_B)
        self.z_random = torch.randn(self.input_A.size(0), ATTR)
        self.fake_A_encoded = self.gen(torch.cat([self.z_content_b, self.z_attr_a], 1))
        self.fake_B_encoded = self.gen(torch.cat([self.z_content_a, self.z_attr_b], 1))
        self.fake_A_random = self.gen(torch.cat([self.z_content_b, self.z_random], 1))
        self.fake_B_random = self.gen(torch.cat([self.z_content_a, self.z_random], 1))
        self.z_content_recon_b, self.z_content_recon_a = self.enc_c(self.fake_A_encoded), self.enc_c(self.fake_B_encoded)
        self.fake_A_recon = self.gen(torch.cat([self.z_content_recon_a, self.z_attr_a], 1))
        self.fake_B_recon = self.gen(torch.cat([self.z_content_recon_b, self.z_attr_b], 1))

    def gan_loss(self, pred, real):
        return F.binary_cross_entropy_with_logits(pred, torch.full_like(pred, 1.0 if real else 0.0))

    def update_D(self, image_a, image_b):
        self.input_A, self.input_B = image_a, image_b
        self.forward()
        self.dis_opt.zero_grad()
        loss = (self.gan_loss(self.disA(image_a), True) + self.gan_loss(self.disA(self.fake_A_encoded.detach()), False)
                + self.gan_loss(self.disB(image_b), True) + self.gan_loss(self.disB(self.fake_B_encoded.detach()), False)
                + self.gan_loss(self.disContent(self.z_content_a.detach()), True)
                + self.gan_loss(self.disContent(self.z_content_b.detach()), False))
        loss.backward()
        self.dis_opt.step()

    def update_EG(self):
        self.enc_c_opt.zero_grad()
        self.enc_a_opt.zero_grad()
        self.gen_opt.zero_grad()
        self.backward_EG()
        self.enc_c_opt.step()
        self.enc_a_opt.step()
        self.gen_opt.step()

        self.enc_c_opt.zero_grad()
        self.gen_opt.zero_grad()
        self.backward_G_alone()
        self.enc_c_opt.step()
        self.gen_opt.step()

    def backward_EG(self):
        loss_content = self.gan_loss(self.disContent(self.z_content_a), False) + \
            self.gan_loss(self.disContent(self.z_content_b), True)
        loss_gan = self.gan_loss(self.disA(self.fake_A_encoded), True) + self.gan_loss(self.disB(self.fake_B_encoded), True)
        kl_element_a = self.mu_a.pow(2).add_(self.logvar_a.exp()).mul_(-1).add_(1).add_(self.logvar_a)
        loss_kl_za_a = torch.sum(kl_element_a).mul_(-0.5) * 0.01
        loss_recon = F.l1_loss(self.fake_A_recon, self.input_A) * 10 + F.l1_loss(self.fake_B_recon, self.input_B) * 10
        (loss_content + loss_gan + loss_kl_za_a + loss_recon).backward(retain_graph=True)

    def backward_G_alone(self):
        loss_gan2 = self.gan_loss(self.disA(self.fake_A_random), True) + self.gan_loss(self.disB(self.fake_B_random), True)
        _, mu2_a, _ = self.encode_attr(self.fake_A_random)
        _, mu2_b, _ = self.encode_attr(self.fake_B_random)
        loss_z_L1 = (F.l1_loss(mu2_a, self.z_random) + F.l1_loss(mu2_b, self.z_random)) * 10
        (loss_gan2 + loss_z_L1).backward()


if __name__ == "__main__":
    model = DRIT()
    model.update_D(torch.rand(4, IMG) * 2 - 1, torch.rand(4, IMG) * 2 - 1)
    model.update_EG()
