# Thread: https://github.com/jacobgil/pytorch-grad-cam/pull/183
# Title: "Use forward hook instead of backward hook to avoid error"
# Diagnosis from the thread: visualising CAMs of mmclassification models with pytorch-grad-cam raised "Output 0
# of BackwardHookFunctionBackward is a view and is being modified in place". ActivationsAndGradients registered
# a full backward hook on the target layer; the module backward hook wraps the layer's output in a
# BackwardHookFunction, and the model then modifies that output in place (the residual `out += identity` and the
# in-place ReLU that follow the target layer). In-place ops are incompatible with module backward hooks (torch
# issue 61519). The merged fix registers a forward hook that puts a tensor hook on the output
# (output.register_hook(...)) to capture the gradient instead.
# Kept: ActivationsAndGradients (forward hook storing activations, a hook storing gradients, release()), a
# GradCAM call (forward, one-hot target score, backward, channel weights from pooled gradients, ReLU'd weighted
# sum), a target layer whose output is modified in place by the block that owns it.
# Added: a small residual network in the mmcls style, a random image and target class.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class BasicBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNetTiny(nn.Module):
    def __init__(self, n_classes=5):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.layer1 = BasicBlock(16)
        self.head = nn.Linear(16, n_classes)

    def forward(self, x):
        return self.head(self.layer1(self.stem(x)).mean(dim=(2, 3)))


class ActivationsAndGradients:
    def __init__(self, model, target_layer):
        self.model = model
        self.gradients, self.activations = [], []
        self.handles = [target_layer.register_forward_hook(self.save_activation),
                        target_layer.register_full_backward_hook(self.save_gradient)]

    def save_activation(self, module, input, output):
        self.activations.append(output.detach())

    def save_gradient(self, module, grad_input, grad_output):
        self.gradients = [grad_output[0].detach()] + self.gradients

    def __call__(self, x):
        self.gradients, self.activations = [], []
        return self.model(x)

    def release(self):
        for handle in self.handles:
            handle.remove()


def grad_cam(model, target_layer, image, target_category):
    extractor = ActivationsAndGradients(model, target_layer)
    output = extractor(image)
    model.zero_grad()
    score = (output * F.one_hot(torch.tensor([target_category]), output.size(-1))).sum()
    score.backward()
    activations, grads = extractor.activations[-1], extractor.gradients[-1]
    weights = grads.mean(dim=(2, 3), keepdim=True)
    cam = F.relu((weights * activations).sum(dim=1))
    extractor.release()
    return cam


if __name__ == "__main__":
    model = ResNetTiny().eval()
    cam = grad_cam(model, model.layer1.bn2, torch.rand(1, 3, 16, 16), target_category=2)
    print(cam.shape)
