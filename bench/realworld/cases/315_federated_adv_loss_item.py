# Source: https://github.com/guopengf/FL-MRCM/issues/10
# Title: "Question of loss_adv_g"
# Thread: in the client update of federated MR reconstruction with adversarial domain alignment, the
# generator's adversarial loss is detached and re-assigned to a Python float before it is added to the
# reconstruction loss, so it never contributes to backpropagation. The author confirmed: the detach
# belongs only in the line that appends the value to the logged loss list (a leftover from fixing a
# GPU memory leak) and fixed it.
# Kept: a local update loop computing loss_recon + lambda * loss_adv_g, the early
# `.detach().item()` on loss_adv_g, the per-batch loss list used for logging, and the fixed variant
# that only detaches in the append. Added: the tiny reconstruction net and domain discriminator, data,
# and the gradient comparison.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ReconNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Conv2d(1, 4, 3, padding=1)
        self.dec = nn.Conv2d(4, 1, 3, padding=1)

    def forward(self, x):
        feat = F.relu(self.enc(x))
        return self.dec(feat), feat


class DomainDiscriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, feat):
        return self.fc(feat.mean(dim=(2, 3)))


class LocalUpdate:
    def __init__(self, lambda_adv=0.1):
        self.lambda_adv = lambda_adv
        self.batch_loss = []

    def generator_loss(self, net, disc, under, full):
        recon, feat = net(under)
        loss_recon = F.l1_loss(recon, full)
        pred = disc(feat)
        loss_adv_g = F.binary_cross_entropy_with_logits(pred, torch.full_like(pred, 0.5))
        loss_adv_g = loss_adv_g.detach().item()
        loss = loss_recon + self.lambda_adv * loss_adv_g
        self.batch_loss.append(loss_adv_g)
        return loss


class LocalUpdateFixed(LocalUpdate):
    def generator_loss(self, net, disc, under, full):
        recon, feat = net(under)
        loss_recon = F.l1_loss(recon, full)
        pred = disc(feat)
        loss_adv_g = F.binary_cross_entropy_with_logits(pred, torch.full_like(pred, 0.5))
        loss = loss_recon + self.lambda_adv * loss_adv_g
        self.batch_loss.append(loss_adv_g.detach().item())
        return loss


def encoder_grads(update, net, disc, under, full):
    net.zero_grad()
    update.generator_loss(net, disc, under, full).backward()
    return [p.grad.clone() for p in net.parameters()]


if __name__ == "__main__":
    torch.manual_seed(0)
    net, disc = ReconNet(), DomainDiscriminator()
    under, full = torch.randn(2, 1, 8, 8), torch.randn(2, 1, 8, 8)
    g_bug = encoder_grads(LocalUpdate(), net, disc, under, full)
    g_fix = encoder_grads(LocalUpdateFixed(), net, disc, under, full)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
