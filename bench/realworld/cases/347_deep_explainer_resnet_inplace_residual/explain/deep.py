import torch


def passthrough(module, grad_input, grad_output):
    return None


def linear_1d(module, grad_input, grad_output):
    return None


def nonlinear_1d(module, grad_input, grad_output):
    half = module.y.shape[0] // 2
    delta_out = module.y[:half] - module.y[half:]
    delta_in = module.x[:half] - module.x[half:]
    dup0 = [2] + [1] * (delta_in.dim() - 1)
    grads = [None] * len(grad_input)
    grads[0] = torch.where(delta_in.abs().repeat(dup0) < 1e-6, grad_input[0],
                           grad_output[0] * (delta_out / delta_in).repeat(dup0))
    return tuple(grads)


OP_HANDLER = {
    "Conv2d": linear_1d,
    "BatchNorm2d": linear_1d,
    "Linear": linear_1d,
    "AdaptiveAvgPool2d": linear_1d,
    "Dropout": passthrough,
    "ReLU": nonlinear_1d,
}


def save_interim_values(module, inputs, output):
    handler = OP_HANDLER.get(type(module).__name__)
    if handler is nonlinear_1d:
        module.x = inputs[0].detach()
        module.y = output.detach()


def deeplift_grad(module, grad_input, grad_output):
    handler = OP_HANDLER.get(type(module).__name__)
    if handler is None or handler in (passthrough, linear_1d):
        return None
    return handler(module, grad_input, grad_output)


class DeepExplainer:
    def __init__(self, model, background):
        self.model = model.eval()
        self.data = background
        with torch.no_grad():
            self.expected_value = self.model(background).mean(0)

    def add_handles(self, module):
        handles = []
        children = list(module.children())
        if children:
            for child in children:
                handles.extend(self.add_handles(child))
        else:
            handles.append(module.register_forward_hook(save_interim_values))
            handles.append(module.register_full_backward_hook(deeplift_grad))
        return handles

    def gradient(self, idx, joint_x):
        self.model.zero_grad()
        x = joint_x.requires_grad_()
        outputs = self.model(x)
        selected = [val for val in outputs[:, idx]]
        return torch.autograd.grad(selected, x)[0]

    def shap_values(self, X, output_index=0):
        handles = self.add_handles(self.model)
        try:
            phis = torch.zeros_like(X)
            for j in range(X.shape[0]):
                tiled = X[j:j + 1].repeat(self.data.shape[0], 1, 1, 1)
                joint_x = torch.cat((tiled, self.data), dim=0)
                grads = self.gradient(output_index, joint_x)
                phis[j] = (grads[self.data.shape[0]:] * (X[j:j + 1] - self.data)).mean(0)
            return phis
        finally:
            for handle in handles:
                handle.remove()
