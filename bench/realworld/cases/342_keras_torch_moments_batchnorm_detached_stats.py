# Thread: https://github.com/keras-team/keras/pull/19102
# Title: "Fix wrong gradients for torch batch_norm and moments"
# Diagnosis from the thread (fixes keras issue #19073): with the torch backend, a BatchNormalization layer in
# training mode gave gradients that deviate from Keras 2 / the other backends. The backend's moments() built the
# variance around `mean.detach()`, cutting the gradient through the batch mean back to the inputs the mean is
# computed from, and batch_normalization() called the fused F.batch_norm with detached mean and variance for
# the same reason. The fix computes the statistics without detaching and normalises with plain tensor ops
# (the fused op cannot take attached statistics); a numerical test was added to catch it.
# Kept: backend functions moments(x, axes, keepdims) and batch_normalization(x, mean, variance, axis, offset,
# scale, epsilon), a BatchNormalization layer calling them on its training path (momentum-updated moving
# statistics under no_grad), a model using that layer. Added: a small MLP, random data, an MSE loss, and the
# gradient comparison with the fixed backend functions.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def moments(x, axes, keepdims=False):
    mean = torch.mean(x, dim=axes, keepdim=True)
    variance = torch.mean(torch.square(x - mean.detach()), dim=axes, keepdim=True)
    if not keepdims:
        mean, variance = mean.squeeze(axes), variance.squeeze(axes)
    return mean, variance


def batch_normalization(x, mean, variance, axis, offset=None, scale=None, epsilon=1e-3):
    return F.batch_norm(x.movedim(axis, 1), mean.detach(), variance.detach(), weight=scale, bias=offset,
                        training=False, eps=epsilon).movedim(1, axis)


def moments_fixed(x, axes, keepdims=False):
    mean = torch.mean(x, dim=axes, keepdim=True)
    variance = torch.mean(torch.square(x - mean), dim=axes, keepdim=True)
    if not keepdims:
        mean, variance = mean.squeeze(axes), variance.squeeze(axes)
    return mean, variance


def batch_normalization_fixed(x, mean, variance, axis, offset=None, scale=None, epsilon=1e-3):
    shape = [1] * x.dim()
    shape[axis] = x.shape[axis]
    inv = torch.rsqrt(variance.view(shape) + epsilon)
    if scale is not None:
        inv = inv * scale.view(shape)
    res = (x - mean.view(shape)) * inv
    return res + offset.view(shape) if offset is not None else res


class BatchNormalization(nn.Module):
    def __init__(self, features, axis=-1, momentum=0.99, epsilon=1e-3, ops=(moments, batch_normalization)):
        super().__init__()
        self.axis, self.momentum, self.epsilon = axis, momentum, epsilon
        self.gamma = nn.Parameter(torch.ones(features))
        self.beta = nn.Parameter(torch.zeros(features))
        self.register_buffer("moving_mean", torch.zeros(features))
        self.register_buffer("moving_variance", torch.ones(features))
        self.moments, self.batch_normalization = ops

    def forward(self, inputs, training=True):
        axis = self.axis % inputs.dim()
        reduction_axes = [i for i in range(inputs.dim()) if i != axis]
        if training:
            mean, variance = self.moments(inputs, axes=reduction_axes, keepdims=False)
            with torch.no_grad():
                self.moving_mean.mul_(self.momentum).add_(mean * (1 - self.momentum))
                self.moving_variance.mul_(self.momentum).add_(variance * (1 - self.momentum))
        else:
            mean, variance = self.moving_mean, self.moving_variance
        return self.batch_normalization(inputs, mean, variance, axis=axis, offset=self.beta, scale=self.gamma,
                                        epsilon=self.epsilon)


def make_model(ops):
    return nn.Sequential(nn.Linear(6, 16), BatchNormalization(16, ops=ops), nn.ReLU(), nn.Linear(16, 1))


def grads(model, x, y):
    model.zero_grad()
    F.mse_loss(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    buggy = make_model((moments, batch_normalization))
    fixed = make_model((moments_fixed, batch_normalization_fixed))
    fixed.load_state_dict(buggy.state_dict())
    x, y = torch.randn(32, 6), torch.randn(32, 1)
    g_bug, g_fix = grads(buggy, x, y), grads(fixed, x, y)
    if not all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
