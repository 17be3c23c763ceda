# Source: https://github.com/pytorch/pytorch/issues/61519
# Title: "Inplace ReLU incompatible with backward hook"
# Thread: a class-activation-map extractor (torch-cam) records a target layer's feature maps with a
# forward hook and its gradients with a module backward hook; the model's next layer is an in-place
# ReLU, which writes into the hooked output and makes the forward fail. The answer's fix: do not use
# the module backward hook, register a tensor hook on the output from inside the forward hook.
# Kept: Sequential(conv, ReLU, conv, ReLU(inplace=True)), a forward hook + full backward hook on the
# conv before the in-place ReLU, and a Grad-CAM style weighting. Added: the extractor class layout,
# a pooled classifier head and the scoring driver.
import torch
import torch.nn as nn
import torch.nn.functional as F


class GradCAMExtractor:
    def __init__(self, model, target_layer):
        self.model = model
        self.activations = None
        self.gradients = None
        target_layer.register_forward_hook(self._store_activation)
        target_layer.register_full_backward_hook(self._store_gradient)

    def _store_activation(self, module, inputs, output):
        self.activations = output.detach()

    def _store_gradient(self, module, grad_input, grad_output):
        self.gradients = grad_output[0].detach()

    def __call__(self, x, class_idx):
        scores = self.model(x)
        scores[:, class_idx].sum().backward()
        weights = self.gradients.mean(dim=(2, 3), keepdim=True)
        return F.relu((weights * self.activations).sum(dim=1))


def build_model():
    features = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.ReLU(inplace=True),
    )
    return nn.Sequential(features, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = build_model()
    cam = GradCAMExtractor(model, model[0][2])
    heatmap = cam(torch.randn(2, 3, 8, 8), class_idx=1)
    print(heatmap.shape)
