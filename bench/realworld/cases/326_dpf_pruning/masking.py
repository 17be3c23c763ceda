import torch
import torch.nn as nn


class MaskHolder(nn.Module):
    """Holds a binary mask in `.weight`, like the repo's mask modules."""

    def __init__(self, shape):
        super().__init__()
        self.register_buffer("weight", torch.ones(shape))


def update_mask(mask, dense_weight, sparsity):
    with torch.no_grad():
        flat = dense_weight.abs().flatten()
        k = int(flat.numel() * sparsity)
        threshold = flat.kthvalue(k).values
        mask.weight.copy_((dense_weight.abs() > threshold).float())


class Masker(torch.autograd.Function):
    """Dynamic pruning with feedback: forward with the masked weight, update the dense weight."""

    @staticmethod
    def forward(ctx, weight, mask):
        return weight * mask

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output, None
