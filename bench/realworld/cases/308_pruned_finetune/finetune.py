import torch
import torch.nn.functional as F

from .speedup import ModelSpeedup


def finetune_step(model, optimizer, images, labels):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    return loss


def prune_then_finetune(model, images, labels):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ModelSpeedup(model).speedup_model()
    finetune_step(model, optimizer, images, labels)
    return optimizer


def prune_then_finetune_fixed(model, images, labels):
    ModelSpeedup(model).speedup_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    finetune_step(model, optimizer, images, labels)
    return optimizer
