# Thread: https://github.com/MC-E/Deep-Generalized-Unfolding-Networks-for-Image-Restoration/issues/6
# Title: "About Loss"
# Diagnosis from the thread: DGUNet's deblurring train.py sums the Charbonnier and edge losses of every stage
# output with np.sum([...]) over a list of loss tensors. That failed for the reporter on CUDA tensors, so they
# rebuilt the sums as `torch.tensor([criterion(restored[j], target) for j in ...], requires_grad=True).sum()`;
# training then ran but the PSNR never changed. torch.tensor copies the values into a new leaf, so the loss is
# cut from the network and backward() only reaches that leaf. The maintainer's answer is to keep summing the
# loss tensors themselves (np.sum on a newer numpy, i.e. a sum that keeps the graph).
# Kept: a multi-stage restoration net returning one image per stage, CharbonnierLoss, EdgeLoss (Gaussian
# pyramid Laplacian), loss = loss_char + 0.05 * loss_edge summed over stages, the rebuilt torch.tensor sums.
# Added: tiny stages, random blurry/sharp pairs, and the gradient comparison with the graph-keeping sum.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class CharbonnierLoss(nn.Module):
    def __init__(self, eps=1e-3):
        super().__init__()
        self.eps = eps

    def forward(self, x, y):
        return torch.mean(torch.sqrt((x - y) ** 2 + self.eps * self.eps))


class EdgeLoss(nn.Module):
    def __init__(self):
        super().__init__()
        k = torch.tensor([[.05, .25, .4, .25, .05]])
        self.kernel = torch.matmul(k.t(), k).unsqueeze(0).repeat(3, 1, 1, 1)
        self.loss = CharbonnierLoss()

    def conv_gauss(self, img):
        img = F.pad(img, (2, 2, 2, 2), mode="replicate")
        return F.conv2d(img, self.kernel, groups=3)

    def laplacian_kernel(self, current):
        filtered = self.conv_gauss(current)
        new_filter = torch.zeros_like(filtered)
        new_filter[:, :, ::2, ::2] = filtered[:, :, ::2, ::2] * 4
        return current - self.conv_gauss(new_filter)

    def forward(self, x, y):
        return self.loss(self.laplacian_kernel(x), self.laplacian_kernel(y))


class MultiStageNet(nn.Module):
    def __init__(self, n_stages=3, width=8):
        super().__init__()
        self.stages = nn.ModuleList(nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.PReLU(),
                                                  nn.Conv2d(width, 3, 3, padding=1)) for _ in range(n_stages))

    def forward(self, x):
        outputs, img = [], x
        for stage in self.stages:
            img = img + stage(img)
            outputs.insert(0, img)
        return outputs


def step_grads(model, input_, target, keep_graph):
    criterion_char, criterion_edge = CharbonnierLoss(), EdgeLoss()
    model.zero_grad()
    restored = model(input_)
    if keep_graph:
        loss_char = torch.stack([criterion_char(restored[j], target) for j in range(len(restored))]).sum()
        loss_edge = torch.stack([criterion_edge(restored[j], target) for j in range(len(restored))]).sum()
    else:
        loss_char = torch.tensor([criterion_char(restored[j], target) for j in range(len(restored))],
                                 requires_grad=True).sum()
        loss_edge = torch.tensor([criterion_edge(restored[j], target) for j in range(len(restored))],
                                 requires_grad=True).sum()
    loss = loss_char + (0.05 * loss_edge)
    loss.backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    model = MultiStageNet()
    target = torch.rand(2, 3, 16, 16)
    input_ = target + 0.1 * torch.randn_like(target)
    g_bug = step_grads(model, input_, target, keep_graph=False)
    g_fix = step_grads(model, input_, target, keep_graph=True)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
