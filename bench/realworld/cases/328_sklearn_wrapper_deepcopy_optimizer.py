# Source: https://github.com/skorch-dev/skorch/issues/317
# Title: "module weights don't update after copy.deepcopy"
# Thread: a skorch NeuralNet that was copy.deepcopy'd keeps training without changing the copied
# module's weights. The net pickles its torch members separately in __getstate__ (module and optimizer
# each serialised on their own), so after the copy the optimizer holds its own copies of the
# parameters rather than the copied module's parameters, and optimizer.step() updates tensors the
# module never uses. The fix (PR #318) serialises module and optimizer together so that their shared
# parameters stay shared.
# Kept: a sklearn-style NeuralNet wrapper with initialize()/fit-step, __getstate__/__setstate__ that
# torch.save each cuda-dependent attribute separately, a deep copy, and the fixed version that saves
# module and optimizer in one structure. Added: a tiny regression module and the comparison of the
# gradients held by the optimizer's parameters after one fit step of the copy.
import copy
import io

import torch
import torch.nn as nn
import torch.nn.functional as F


class NeuralNet:
    cuda_dependent_attributes_ = ["module_", "optimizer_"]

    def __init__(self, module_cls, lr=0.1):
        self.module_cls = module_cls
        self.lr = lr

    def initialize(self):
        torch.manual_seed(0)
        self.module_ = self.module_cls()
        self.optimizer_ = torch.optim.SGD(self.module_.parameters(), lr=self.lr)
        return self

    def train_step(self, X, y):
        self.optimizer_.zero_grad()
        loss = F.mse_loss(self.module_(X), y)
        loss.backward()
        self.optimizer_.step()
        return loss

    def __getstate__(self):
        state = self.__dict__.copy()
        for key in self.cuda_dependent_attributes_:
            buf = io.BytesIO()
            torch.save(state.pop(key), buf)
            state[key] = buf.getvalue()
        return state

    def __setstate__(self, state):
        for key in self.cuda_dependent_attributes_:
            state[key] = torch.load(io.BytesIO(state[key]), weights_only=False)
        self.__dict__.update(state)


class NeuralNetFixed(NeuralNet):
    def __getstate__(self):
        state = self.__dict__.copy()
        torch_members = {key: state.pop(key) for key in self.cuda_dependent_attributes_}
        buf = io.BytesIO()
        torch.save(torch_members, buf)
        state["__torch_members__"] = buf.getvalue()
        return state

    def __setstate__(self, state):
        torch_members = torch.load(io.BytesIO(state.pop("__torch_members__")), weights_only=False)
        state.update(torch_members)
        self.__dict__.update(state)


def Regressor():
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))


def grads_seen_by_optimizer(net_cls, X, y):
    net = net_cls(Regressor).initialize()
    net_copy = copy.deepcopy(net)
    net_copy.train_step(X, y)
    return [
        torch.zeros_like(p) if p.grad is None else p.grad.clone()
        for group in net_copy.optimizer_.param_groups
        for p in group["params"]
    ]


if __name__ == "__main__":
    torch.manual_seed(0)
    X, y = torch.randn(10, 3), torch.randn(10, 1)
    g_bug = grads_seen_by_optimizer(NeuralNet, X, y)
    g_fix = grads_seen_by_optimizer(NeuralNetFixed, X, y)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
