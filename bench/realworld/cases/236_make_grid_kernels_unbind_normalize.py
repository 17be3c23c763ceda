# Source: https://github.com/pytorch/vision/issues/3025
# Title: "torchvision/utils.py modify grad_fn of the tensor, throw exception "Output X of UnbindBackward is a view
# and is being modified inplace""
# Diagnosis from the thread: to log the first conv layer's kernels, the user passes slices of the conv weight
# (which require grad) to make_grid(normalize=True, scale_each=True); make_grid clones the batch and then does
# `for t in tensor: norm_range(t, ...)`, and norm_range clamps / shifts / divides each image in place; iterating a
# tensor that requires grad yields the outputs of unbind, so the in-place normalisation is refused. The fix is to
# do the grid normalisation without autograd (detach the kernels, or run make_grid under no_grad). Kept from the
# thread: the loop over the model's Conv2d modules, kernels[o_idx].unsqueeze(1) per output channel, make_grid with
# normalize/scale_each/nrow, and make_grid's clone + per-image in-place norm_ip. Added: a tiny CNN, a training
# step around the visualisation (as a TensorBoard logging hook would be), sizes.
import math

import torch
import torch.nn as nn


def make_grid(tensor, nrow=8, padding=2, normalize=False, value_range=None, scale_each=False, pad_value=0):
    if tensor.dim() == 3:
        tensor = tensor.unsqueeze(0)
    if tensor.size(1) == 1:
        tensor = torch.cat((tensor, tensor, tensor), 1)
    if normalize is True:
        tensor = tensor.clone()  # avoid modifying tensor in-place

        def norm_ip(img, low, high):
            img.clamp_(min=low, max=high)
            img.sub_(low).div_(max(high - low, 1e-5))

        def norm_range(t, value_range):
            if value_range is not None:
                norm_ip(t, value_range[0], value_range[1])
            else:
                norm_ip(t, float(t.min()), float(t.max()))

        if scale_each is True:
            for t in tensor:  # loop over mini-batch dimension
                norm_range(t, value_range)
        else:
            norm_range(tensor, value_range)
    nmaps = tensor.size(0)
    xmaps = min(nrow, nmaps)
    ymaps = int(math.ceil(float(nmaps) / xmaps))
    height, width = int(tensor.size(2) + padding), int(tensor.size(3) + padding)
    grid = tensor.new_full((3, height * ymaps + padding, width * xmaps + padding), pad_value)
    k = 0
    for y in range(ymaps):
        for x in range(xmaps):
            if k >= nmaps:
                break
            grid.narrow(1, y * height + padding, height - padding).narrow(
                2, x * width + padding, width - padding).copy_(tensor[k])
            k += 1
    return grid


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.ReLU())
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


def log_kernels(model):
    grids = []
    for sub_module in model.modules():
        if isinstance(sub_module, nn.Conv2d):
            kernels = sub_module.weight
            c_out, c_int, k_w, k_h = tuple(kernels.shape)
            for o_idx in range(c_out):
                kernel_idx = kernels[o_idx, :, :, :].unsqueeze(1)
                img_grid = make_grid(kernel_idx, normalize=True, scale_each=True, nrow=c_int)
                grids.append(img_grid)
    return grids


if __name__ == "__main__":
    torch.manual_seed(0)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = nn.functional.cross_entropy(model(torch.randn(2, 3, 8, 8)), torch.tensor([0, 1]))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    log_kernels(model)
    print("ok")
