# Case 123, trainer: Trainer.forward() returns the losses dict for both the critics and the generator (see main.py).
import torch
import torch.nn as nn
from torch import autograd

from .networks import Generator, GlobalDis, LocalDis, l1


def local_patch(x, bbox):
    top, left, h, w = bbox
    return x[:, :, top:top + h, left:left + w]


class Trainer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.netG = Generator()
        self.localD = LocalDis(patch=config["mask_shape"])
        self.globalD = GlobalDis(size=config["image_shape"])
        self.optimizer_g = torch.optim.Adam(self.netG.parameters(), lr=config["lr"], betas=(0.5, 0.9))
        d_params = list(self.localD.parameters()) + list(self.globalD.parameters())
        self.optimizer_d = torch.optim.Adam(d_params, lr=config["lr"], betas=(0.5, 0.9))

    def forward(self, x, bbox, masks, ground_truth, compute_loss_g=False):
        losses = {}
        x1, x2, offset_flow = self.netG(x, masks)
        local_patch_gt = local_patch(ground_truth, bbox)
        x1_inpaint = x1 * masks + x * (1.0 - masks)
        x2_inpaint = x2 * masks + x * (1.0 - masks)
        local_patch_x1_inpaint = local_patch(x1_inpaint, bbox)
        local_patch_x2_inpaint = local_patch(x2_inpaint, bbox)

        # D part: wgan d loss on detached fakes
        local_real, local_fake = self.dis_forward(self.localD, local_patch_gt, local_patch_x2_inpaint.detach())
        global_real, global_fake = self.dis_forward(self.globalD, ground_truth, x2_inpaint.detach())
        losses["wgan_d"] = torch.mean(local_fake - local_real) + \
            torch.mean(global_fake - global_real) * self.config["global_wgan_loss_alpha"]
        local_penalty = self.calc_gradient_penalty(self.localD, local_patch_gt, local_patch_x2_inpaint.detach())
        global_penalty = self.calc_gradient_penalty(self.globalD, ground_truth, x2_inpaint.detach())
        losses["wgan_gp"] = local_penalty + global_penalty

        # G part
        if compute_loss_g:
            losses["l1"] = l1(local_patch_x1_inpaint, local_patch_gt) * self.config["coarse_l1_alpha"] + \
                l1(local_patch_x2_inpaint, local_patch_gt)
            losses["ae"] = l1(x1 * (1.0 - masks), ground_truth * (1.0 - masks)) * self.config["coarse_l1_alpha"] + \
                l1(x2 * (1.0 - masks), ground_truth * (1.0 - masks))
            local_real, local_fake = self.dis_forward(self.localD, local_patch_gt, local_patch_x2_inpaint)
            global_real, global_fake = self.dis_forward(self.globalD, ground_truth, x2_inpaint)
            losses["wgan_g"] = -torch.mean(local_fake) - \
                torch.mean(global_fake) * self.config["global_wgan_loss_alpha"]
        return losses, x2_inpaint, offset_flow

    def dis_forward(self, netD, ground_truth, x_inpaint):
        batch_size = ground_truth.size(0)
        batch_data = torch.cat([ground_truth, x_inpaint], dim=0)
        batch_output = netD(batch_data)
        return torch.split(batch_output, batch_size, dim=0)

    def calc_gradient_penalty(self, netD, real_data, fake_data):
        alpha = torch.rand(real_data.size(0), 1, 1, 1).expand_as(real_data)
        interpolates = (alpha * real_data + (1 - alpha) * fake_data).requires_grad_(True)
        disc_interpolates = netD(interpolates)
        gradients = autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                                  grad_outputs=torch.ones(disc_interpolates.size()),
                                  create_graph=True, retain_graph=True, only_inputs=True)[0]
        gradients = gradients.view(gradients.size(0), -1)
        return ((gradients.norm(2, dim=1) - 1) ** 2).mean()
