import torch
import torch.nn.functional as F

from .masking import update_mask


def train_dpf(model, images, labels, steps=2, sparsity=0.5, lr=0.5):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    grads = []
    for _ in range(steps):
        block = model.block
        update_mask(block.mask1, block.conv1.weight, sparsity)
        update_mask(block.mask2, block.conv2.weight, sparsity)
        optimizer.zero_grad()
        F.cross_entropy(model(images), labels).backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        optimizer.step()
    return grads
