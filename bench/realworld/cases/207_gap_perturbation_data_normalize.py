# Source: https://github.com/OmidPoursaeed/Generative_Adversarial_Perturbations/issues/4
# Title: "Wrong Implementation"
# Diagnosis from the thread: the generator's perturbation is normalised per colour channel by writing through
# `delta_im.data[...]`; on a non-leaf tensor that change is invisible to autograd, so the gradient reaching the
# generator misses the 1/std factor (the thread's toy shows a gradient 4x too small). No error is raised. The
# fix is to do the normalisation out of place on the tensor itself. Kept from the thread: a generator producing
# delta_im in [-1, 1], the `+1, *0.5` rescale, the per-channel `.data` normalisation by ImageNet mean/std, the
# L-inf magnitude clamp, the fooling loss on a frozen classifier. Added: tiny generator/classifier, shapes, and
# the comparison with the fixed normalisation.
import torch
import torch.nn as nn
import torch.nn.functional as F

mean_arr = [0.485, 0.456, 0.406]
stddev_arr = [0.229, 0.224, 0.225]
mag_in = 10.0


class ResnetGenerator(nn.Module):
    def __init__(self, ch=3, width=8):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(ch, width, 3, padding=1), nn.ReLU(), nn.Conv2d(width, ch, 3, padding=1),
                                 nn.Tanh())

    def forward(self, noise):
        return self.net(noise)


def normalize_and_scale(delta_im):
    delta_im = delta_im + 1  # now 0..2
    delta_im = delta_im * 0.5  # now 0..1
    for c in range(3):
        delta_im.data[:, c, :, :] = (delta_im.data[:, c, :, :] - mean_arr[c]) / stddev_arr[c]
    scales = []
    for c in range(3):
        l_inf_channel = delta_im[:, c].detach().abs().amax(dim=(1, 2))
        mag_in_scaled_c = mag_in / (255.0 * stddev_arr[c])
        scales.append(torch.clamp(mag_in_scaled_c / l_inf_channel, max=1.0))
    return delta_im * torch.stack(scales, dim=1)[:, :, None, None]


def normalize_and_scale_fixed(delta_im):
    delta_im = (delta_im + 1) * 0.5
    mean = torch.tensor(mean_arr)[None, :, None, None]
    std = torch.tensor(stddev_arr)[None, :, None, None]
    delta_im = (delta_im - mean) / std
    scales = []
    for c in range(3):
        l_inf_channel = delta_im[:, c].detach().abs().amax(dim=(1, 2))
        mag_in_scaled_c = mag_in / (255.0 * stddev_arr[c])
        scales.append(torch.clamp(mag_in_scaled_c / l_inf_channel, max=1.0))
    return delta_im * torch.stack(scales, dim=1)[:, :, None, None]


def generator_grads(netG, classifier, noise, images, labels, normalize):
    netG.zero_grad()
    delta_im = normalize(netG(noise))
    recons = images + delta_im
    logits = classifier(recons)
    loss = torch.log(F.cross_entropy(logits, labels))  # maximise the classifier's loss
    (-loss).backward()
    return [p.grad.clone() for p in netG.parameters()]


if __name__ == "__main__":
    torch.manual_seed(0)
    netG = ResnetGenerator()
    classifier = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                               nn.Linear(4, 5))
    for p in classifier.parameters():
        p.requires_grad_(False)
    noise = torch.rand(2, 3, 8, 8)
    images = torch.randn(2, 3, 8, 8)
    labels = torch.tensor([1, 3])
    buggy = generator_grads(netG, classifier, noise, images, labels, normalize_and_scale)
    fixed = generator_grads(netG, classifier, noise, images, labels, normalize_and_scale_fixed)
    same = all(torch.allclose(a, b) for a, b in zip(buggy, fixed))
    print("gradguard-case: gradients differ from the fix" if not same else "gradients match")
