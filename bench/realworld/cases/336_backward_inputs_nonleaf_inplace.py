# Source: https://github.com/pytorch/pytorch/issues/79708
# Title: "`backward(inputs=)` is not working as expected when inplace are involved (and grad() does work fine)"
# Thread: a non-leaf copy of a parameter (`non_leaf_param = param.clone()`) is differentiated in a loop
# with `loss.backward(inputs=[non_leaf_param], create_graph=True)` and then updated in place
# (`non_leaf_param.add_(...)`) before the next iteration. After the in-place update the `.grad` that
# backward(inputs=) fills in for the non-leaf tensor is wrong, while torch.autograd.grad(loss,
# non_leaf_param) on the same graph gives the right value; the thread's workaround is to use
# autograd.grad for non-leaf inputs.
# Kept: param -> non-leaf clone, per-iteration inner clone, backward(inputs=[non_leaf], create_graph=True)
# reading `.grad` after resetting it to None, the in-place add_ on the non-leaf between iterations.
# Added: a quadratic regression loss instead of sum(), a small "inner-loop" driver and the comparison
# with autograd.grad.
import torch


def inner_loop_grads(param, x, y, steps=2, shift=0.1):
    non_leaf_param = param.clone()
    grads = []
    for _ in range(steps):
        inner_clone = non_leaf_param.clone()
        non_leaf_param.grad = None
        loss = ((x @ inner_clone) - y).pow(2).mean()
        loss.backward(inputs=[non_leaf_param], create_graph=True)
        grads.append(non_leaf_param.grad.detach().clone())
        non_leaf_param.add_(1.0, alpha=shift)
    return grads


def inner_loop_grads_fixed(param, x, y, steps=2, shift=0.1):
    non_leaf_param = param.clone()
    grads = []
    for _ in range(steps):
        inner_clone = non_leaf_param.clone()
        loss = ((x @ inner_clone) - y).pow(2).mean()
        (g,) = torch.autograd.grad(loss, non_leaf_param, create_graph=True)
        grads.append(g.detach().clone())
        non_leaf_param.add_(1.0, alpha=shift)
    return grads


if __name__ == "__main__":
    torch.manual_seed(0)
    param = torch.randn(3, requires_grad=True)
    x, y = torch.randn(5, 3), torch.randn(5)
    g_bug = inner_loop_grads(param, x, y)
    g_fix = inner_loop_grads_fixed(param, x, y)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
