# Thread: https://github.com/sharif-apu/BJDD_CVPR21/issues/11
# Title: "Why the color loss can optimize the generator?"
# Diagnosis from the thread: in the BJDD (joint demosaicking + denoising) GAN trainer, the generator's total
# loss includes a color loss, but that loss detaches the generated image from the graph and converts it to a
# numpy array before comparing colours; the result comes back as a constant, so "the grads cannot backpropagate
# to the network" and the colour term never trains the generator. A second user confirms the same problem and
# nobody shows otherwise: the colour term has to be computed with torch ops on the attached output.
# Kept: a generator/discriminator pair with their own Adam optimisers, the discriminator step on detached fakes,
# the generator loss = reconstruction L1 + weighted colour loss + adversarial BCE, the colour loss going through
# .detach().cpu().numpy() and back via torch.tensor. Added: tiny nets, random mosaicked inputs and targets, an
# RGB->YUV chroma comparison as the colour metric, and the generator-gradient comparison with the same colour
# loss written in torch.
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)

YUV = np.array([[0.299, 0.587, 0.114], [-0.147, -0.289, 0.436], [0.615, -0.515, -0.100]], dtype=np.float32)


class ColorLoss(nn.Module):
    def forward(self, generated, ground_truth):
        gen = generated.detach().cpu().numpy()
        gt = ground_truth.detach().cpu().numpy()
        gen_uv = np.einsum("cd,bdhw->bchw", YUV, gen)[:, 1:]
        gt_uv = np.einsum("cd,bdhw->bchw", YUV, gt)[:, 1:]
        return torch.tensor(np.abs(gen_uv - gt_uv).mean())


class ColorLossTorch(nn.Module):
    def forward(self, generated, ground_truth):
        yuv = torch.from_numpy(YUV)
        gen_uv = torch.einsum("cd,bdhw->bchw", yuv, generated)[:, 1:]
        gt_uv = torch.einsum("cd,bdhw->bchw", yuv, ground_truth)[:, 1:]
        return (gen_uv - gt_uv).abs().mean()


def make_generator():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.LeakyReLU(0.2), nn.Conv2d(16, 3, 3, padding=1),
                         nn.Tanh())


def make_discriminator():
    return nn.Sequential(nn.Conv2d(3, 16, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
                         nn.Conv2d(16, 1, 4, stride=2, padding=1), nn.Flatten(), nn.LazyLinear(1))


def train_step(generator, discriminator, color_loss, input_img, gt_img, color_weight=1.0, adv_weight=1e-3):
    opt_g = torch.optim.Adam(generator.parameters(), lr=1e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-4, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()
    l1 = nn.L1Loss()

    fake = generator(input_img)
    opt_d.zero_grad()
    d_real, d_fake = discriminator(gt_img), discriminator(fake.detach())
    loss_d = bce(d_real, torch.ones_like(d_real)) + bce(d_fake, torch.zeros_like(d_fake))
    loss_d.backward()
    opt_d.step()

    opt_g.zero_grad()
    d_fake = discriminator(fake)
    loss_g = l1(fake, gt_img) + color_weight * color_loss(fake, gt_img) \
        + adv_weight * bce(d_fake, torch.ones_like(d_fake))
    loss_g.backward()
    return [p.grad.clone() for p in generator.parameters()]


if __name__ == "__main__":
    gt_img = torch.rand(2, 3, 16, 16) * 2 - 1
    mosaic = torch.zeros(1, 3, 16, 16)
    mosaic[:, 0, 0::2, 0::2] = 1
    mosaic[:, 1, 0::2, 1::2] = 1
    mosaic[:, 1, 1::2, 0::2] = 1
    mosaic[:, 2, 1::2, 1::2] = 1
    input_img = gt_img * mosaic + 0.05 * torch.randn_like(gt_img)
    gen_a, disc_a = make_generator(), make_discriminator()
    disc_a(gt_img)
    gen_b, disc_b = make_generator(), make_discriminator()
    disc_b(gt_img)
    gen_b.load_state_dict(gen_a.state_dict())
    disc_b.load_state_dict(disc_a.state_dict())
    g_bug = train_step(gen_a, disc_a, ColorLoss(), input_img, gt_img)
    g_fix = train_step(gen_b, disc_b, ColorLossTorch(), input_img, gt_img)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
