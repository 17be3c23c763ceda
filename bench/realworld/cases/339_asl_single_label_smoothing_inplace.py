# Source: https://github.com/huggingface/pytorch-image-models/pull/1500
# Title: "Remove inplace operators when calculating the loss"
# Thread: using timm's asymmetric loss fails with "one of the variables needed for gradient computation
# has been modified by an inplace operation"; the PR replaces the in-place operators in the loss.
# In AsymmetricLossSingleLabel the one-hot targets tensor is used to weight the probabilities
# (`xs_pos * targets`, which saves `targets` for backward) and is then label-smoothed in place
# (`self.targets_classes.mul_(1 - eps).add_(eps / num_classes)`); the out-of-place
# `.mul(...).add(...)` is what timm uses now.
# Kept: the AsymmetricLossSingleLabel forward (log-softmax, scatter_ one-hot targets kept on the module,
# exp / 1 - p, the asymmetric focusing weight with pow, the in-place label smoothing, the final
# -targets * log_preds sum/mean). Added: a tiny classifier and the training step.
import torch
import torch.nn as nn


class AsymmetricLossSingleLabel(nn.Module):
    def __init__(self, gamma_pos=1, gamma_neg=4, eps: float = 0.1, reduction="mean"):
        super().__init__()
        self.eps = eps
        self.logsoftmax = nn.LogSoftmax(dim=-1)
        self.targets_classes = []  # prevent gpu repeated memory allocation
        self.gamma_pos = gamma_pos
        self.gamma_neg = gamma_neg
        self.reduction = reduction

    def forward(self, inputs, target):
        num_classes = inputs.size()[-1]
        log_preds = self.logsoftmax(inputs)
        self.targets_classes = torch.zeros_like(inputs).scatter_(1, target.long().unsqueeze(1), 1)

        targets = self.targets_classes
        anti_targets = 1 - targets
        xs_pos = torch.exp(log_preds)
        xs_neg = 1 - xs_pos
        xs_pos = xs_pos * targets
        xs_neg = xs_neg * anti_targets
        asymmetric_w = torch.pow(1 - xs_pos - xs_neg, self.gamma_pos * targets + self.gamma_neg * anti_targets)
        log_preds = log_preds * asymmetric_w

        if self.eps > 0:  # label smoothing
            self.targets_classes.mul_(1 - self.eps).add_(self.eps / num_classes)

        loss = -self.targets_classes.mul(log_preds)
        loss = loss.sum(dim=-1)
        if self.reduction == "mean":
            loss = loss.mean()
        return loss


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 5))
    criterion = AsymmetricLossSingleLabel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(6, 8), torch.randint(0, 5, (6,))
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
