# Source: https://github.com/shap/shap/issues/1479
# Title: "Deep Explainer fails on Resnet50 pretrained model."
# Thread: shap's PyTorch DeepExplainer registers a forward hook and a full backward hook
# (register_full_backward_hook, the DeepLIFT rescale rule) on every leaf module of the model, then
# runs the model on inputs that require grad to take gradients of the outputs. torchvision's
# ResNet BasicBlock applies a shared `nn.ReLU(inplace=True)` and adds the shortcut with
# `out += identity`; with the hooks in place those in-place ops modify tensors the backward-hook
# machinery returned as views, and torch refuses. The answer: set inplace=False in the ReLU and
# replace `out += identity` with `out = out + identity`.
# Kept: the explainer's recursive add_handles over leaf modules (forward hook saving detached x/y,
# full backward hook returning the DeepLIFT multipliers for ReLU), gradient() on the tiled input
# joined with the background, shap_values' loop over samples; a BasicBlock/ResNet with the shared
# in-place ReLU, the downsample branch and the in-place residual add. Added: a two-stage width-8
# ResNet on 8x8 images, random background and samples.
import torch

from .explain import DeepExplainer
from .nets import resnet_tiny


if __name__ == "__main__":
    torch.manual_seed(0)
    model = resnet_tiny(num_classes=4)
    background = torch.randn(4, 3, 8, 8)
    samples = torch.randn(2, 3, 8, 8)
    explainer = DeepExplainer(model, background)
    values = explainer.shap_values(samples, output_index=1)
    print(values.shape)
