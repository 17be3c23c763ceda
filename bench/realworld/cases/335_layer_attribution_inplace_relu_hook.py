# Source: https://github.com/meta-pytorch/captum/pull/165
# Title: "Fixing Layer / Neuron Attributions with In-place Operations"
# Thread (addresses captum issue #156): layer attributions capture the target layer's output with a
# forward hook and then use that tensor both as the activation and as the variable the output score is
# differentiated against. When the next module is ReLU(inplace=True), it overwrites the captured tensor
# after the hook ran, so both the activation values and the layer gradients are those of the ReLU
# output rather than of the layer. The PR keeps clones so later ops cannot modify the captured values;
# for gradients it overrides the module output with a clone, so the in-place op rewrites the clone and
# the captured output stays intact.
# Kept: a forward-hook based "gradient x activation" layer attribution on a Sequential model whose
# hooked conv is followed by nn.ReLU(inplace=True), torch.autograd.grad of the target score w.r.t. the
# captured layer output. Added: the small model, the attribution class layout, and the comparison with
# the hook that returns a clone.
import torch
import torch.nn as nn


class LayerGradientXActivation:
    def __init__(self, model, layer):
        self.model = model
        self.layer = layer

    def _hook(self, saved):
        def hook(module, inputs, output):
            saved.append(output)
        return hook

    def attribute(self, inputs, target):
        saved = []
        handle = self.layer.register_forward_hook(self._hook(saved))
        try:
            scores = self.model(inputs)[:, target].sum()
        finally:
            handle.remove()
        (layer_grad,) = torch.autograd.grad(scores, saved[0])
        return layer_grad, layer_grad * saved[0]


class LayerGradientXActivationFixed(LayerGradientXActivation):
    def _hook(self, saved):
        def hook(module, inputs, output):
            saved.append(output)
            return output.clone()
        return hook


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(4, 4, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.Flatten(),
        nn.Linear(4 * 5 * 5, 3),
    )


if __name__ == "__main__":
    torch.manual_seed(1)
    inputs = torch.randn(2, 3, 5, 5)
    buggy, fixed = make_model(), make_model()
    grad_bug, attr_bug = LayerGradientXActivation(buggy, buggy[0]).attribute(inputs, target=1)
    grad_fix, attr_fix = LayerGradientXActivationFixed(fixed, fixed[0]).attribute(inputs, target=1)
    if not (torch.allclose(grad_bug, grad_fix) and torch.allclose(attr_bug, attr_fix)):
        print("gradguard-case: gradients differ from the fix")
