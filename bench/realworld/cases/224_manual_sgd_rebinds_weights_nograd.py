# Source: https://hao-yiwen.github.io/yiwen-blog-website/en/docs/ai/frameworks/pytorch/common-errors
# Title: "PyTorch 常见错误与陷阱" (common PyTorch errors and pitfalls; section: in-place update vs re-assignment)
# Diagnosis from the post: in a hand-written gradient-descent loop the update `w = w - lr * w.grad` is computed
# inside torch.no_grad(), so it creates a *new* tensor with requires_grad=False and rebinds the name to it; from
# the next iteration on nothing in the forward requires grad and backward fails (or the parameter silently stops
# training). The recommended form is the in-place `w -= lr * w.grad` under no_grad, then `w.grad.zero_()`.
# Kept from the post: manual parameters w, b with requires_grad=True, forward/loss/backward per step, the
# no_grad update that rebinds the names. Added: the toy linear-regression data, learning rate, step count.
import torch


def train(steps=3, lr=0.1):
    torch.manual_seed(0)
    x = torch.randn(16, 3)
    true_w = torch.tensor([[1.5], [-2.0], [0.5]])
    y = x @ true_w + 0.3
    w = torch.randn(3, 1, requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    for step in range(steps):
        pred = x @ w + b
        loss = ((pred - y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            w = w - lr * w.grad
            b = b - lr * b.grad
    return w, b


if __name__ == "__main__":
    train()
    print("ok")
