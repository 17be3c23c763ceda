# Source: https://github.com/keras-team/keras-core/pull/405
# Title: "Copy torch tensor before update in `slice_update`"
# Thread: the torch backend's `slice_update(inputs, start_indices, updates)` wrote the updates into
# `inputs` in place; when gradients are needed for the input tensor the call fails with "a leaf
# Variable that requires grad is being used in an in-place operation." The fix clones the input
# first, so the update is no longer in place on the caller's tensor.
# Kept: a backend op that converts its argument to a tensor, builds the slices from start_indices and
# the updates' shape, assigns `inputs[slices] = updates` and returns inputs; it is called on a tensor
# that requires grad. Added: the caller (a layer that writes a learned block into a trainable canvas,
# as in a cache/scatter update), shapes, and the gradient computation that hits the error.
import torch
import torch.nn as nn


def convert_to_tensor(x, dtype=None):
    if isinstance(x, torch.Tensor):
        return x if dtype is None else x.to(dtype)
    return torch.as_tensor(x, dtype=dtype)


def slice_update(inputs, start_indices, updates):
    inputs = convert_to_tensor(inputs)
    updates = convert_to_tensor(updates)
    slices = tuple(slice(int(start), int(start) + size) for start, size in zip(start_indices, updates.shape))
    inputs[slices] = updates
    return inputs


class CanvasWriter(nn.Module):
    def __init__(self, canvas_shape=(6, 6), patch=2):
        super().__init__()
        self.patch = patch
        self.to_patch = nn.Linear(4, patch * patch)

    def forward(self, canvas, code, position):
        patch = self.to_patch(code).view(self.patch, self.patch)
        return slice_update(canvas, position, patch)


if __name__ == "__main__":
    torch.manual_seed(0)
    writer = CanvasWriter()
    canvas = torch.zeros(6, 6, requires_grad=True)
    out = writer(canvas, torch.randn(4), (2, 3))
    grads = torch.autograd.grad(out.pow(2).sum(), [canvas] + list(writer.parameters()))
    print([g.shape for g in grads])
