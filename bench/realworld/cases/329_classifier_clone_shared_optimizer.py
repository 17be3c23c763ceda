# Source: https://github.com/Trusted-AI/adversarial-robustness-toolbox/pull/1580
# Title: "PyTorchClassifier: use a new optimizer for the cloned classifier"
# Thread (fixes issue #1579): PyTorchClassifier.clone_for_refitting() deep-copies the model but
# hands the clone the *original* optimizer object, whose param_groups point at the original model's
# parameters. Refitting the clone therefore computes gradients on the clone's parameters while
# optimizer.step() updates the original model (whose grads are empty), so the clone never learns.
# The fix creates a new optimizer of the same class over the clone's parameters (and reset() creates a
# new optimizer too, as the reviewer asked).
# Kept: an estimator wrapper holding model + optimizer + loss, clone_for_refitting() with
# copy.deepcopy(model) and the shared optimizer, reset() re-initialising the weights, and fit() on the
# clone. Added: a tiny classifier, data, and the gradient comparison on the optimizer's parameters.
import copy

import torch
import torch.nn as nn


class PyTorchClassifier:
    def __init__(self, model, loss, optimizer, nb_classes):
        self._model = model
        self._loss = loss
        self._optimizer = optimizer
        self.nb_classes = nb_classes

    @property
    def model(self):
        return self._model

    def reset(self):
        def weight_reset(module):
            if isinstance(module, nn.Linear):
                module.reset_parameters()

        self._model.apply(weight_reset)

    def clone_for_refitting(self):
        model = copy.deepcopy(self._model)
        clone = type(self)(model=model, loss=self._loss, optimizer=self._optimizer, nb_classes=self.nb_classes)
        clone.reset()
        return clone

    def fit_batch(self, x, y):
        self._optimizer.zero_grad()
        loss = self._loss(self._model(x), y)
        loss.backward()
        self._optimizer.step()
        return loss

    def optimizer_grads(self):
        return [
            torch.zeros_like(p) if p.grad is None else p.grad.clone()
            for group in self._optimizer.param_groups
            for p in group["params"]
        ]


class PyTorchClassifierFixed(PyTorchClassifier):
    def clone_for_refitting(self):
        model = copy.deepcopy(self._model)
        new_optimizer = type(self._optimizer)(model.parameters(), **self._optimizer.defaults)
        clone = type(self)(model=model, loss=self._loss, optimizer=new_optimizer, nb_classes=self.nb_classes)
        clone.reset()
        return clone


def refit_clone_grads(classifier_cls, x, y):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    classifier = classifier_cls(model, nn.CrossEntropyLoss(), optimizer, nb_classes=3)
    torch.manual_seed(1)
    clone = classifier.clone_for_refitting()
    clone.fit_batch(x, y)
    return clone.optimizer_grads()


if __name__ == "__main__":
    torch.manual_seed(0)
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    g_bug = refit_clone_grads(PyTorchClassifier, x, y)
    g_fix = refit_clone_grads(PyTorchClassifierFixed, x, y)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
