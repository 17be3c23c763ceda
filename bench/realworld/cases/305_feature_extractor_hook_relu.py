# Source: https://github.com/KamitaniLab/bdpy/issues/16
# Title: "The `FeatureExtractor` automatically operate relu operation"
# Thread: bdpy's torch FeatureExtractor appends each hooked module's output to a list from a forward
# hook; the layer after the hooked conv is an in-place ReLU, so the stored "conv" features are
# rectified after the fact. The reporter's fix is to store `module_out.clone()`.
# Kept: a FeatureExtractor class with forward hooks appending outputs to self.outputs, a conv layer
# followed by ReLU(inplace=True), and use of the features in bdpy's image reconstruction (the input
# image is optimised to match target features). Added: the tiny CNN, the MSE feature loss and the
# comparison with the cloned-output extractor.
import torch
import torch.nn as nn
import torch.nn.functional as F


class FeatureExtractor:
    def __init__(self, encoder, layers):
        self.encoder = encoder
        self.outputs = []
        modules = dict(encoder.named_modules())
        for layer in layers:
            modules[layer].register_forward_hook(self._hook)

    def _hook(self, module, module_in, module_out):
        self.outputs.append(module_out)

    def __call__(self, x):
        self.outputs = []
        self.encoder(x)
        return self.outputs


class FeatureExtractorFixed(FeatureExtractor):
    def _hook(self, module, module_in, module_out):
        self.outputs.append(module_out.clone())


def make_encoder():
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(4, 4, 3, padding=1),
        nn.ReLU(inplace=True),
    )


def reconstruction_grad(extractor, target_image, init_image):
    with torch.no_grad():
        target_feats = [f.clone() for f in extractor(target_image)]
    image = init_image.clone().requires_grad_(True)
    feats = extractor(image)
    loss = sum(F.mse_loss(f, t) for f, t in zip(feats, target_feats))
    loss.backward()
    return image.grad


if __name__ == "__main__":
    torch.manual_seed(0)
    encoder = make_encoder()
    target, init = torch.randn(1, 3, 6, 6), torch.randn(1, 3, 6, 6)
    g_bug = reconstruction_grad(FeatureExtractor(encoder, ["0", "2"]), target, init)
    encoder_fixed = make_encoder()
    encoder_fixed.load_state_dict(encoder.state_dict())
    g_fix = reconstruction_grad(FeatureExtractorFixed(encoder_fixed, ["0", "2"]), target, init)
    if not torch.allclose(g_bug, g_fix):
        print("gradguard-case: gradients differ from the fix")
