# Source: https://github.com/Lightning-AI/pytorch-lightning/issues/2862
# Title: "Metrics error due to inplace operation, "computation has been modified by an inplace operation"."
# Thread: in a LightningModule's training_step the loss is F.cross_entropy(y_hat, y) and then the
# functional `accuracy(y_hat, y)` metric is computed on the same target tensor; after an upgrade the
# metric modified `y` in place and backward failed with a LongTensor version error. Passing
# `y.clone()` to the metric fixes it (the metric should not mutate its inputs).
# Kept: training_step computing cross_entropy then accuracy on the same `y`, returning
# {'loss': ..., 'log': ...}, and the automatic backward done by the trainer afterwards. Added: a
# minimal LightningModule/Trainer stand-in (no lightning dependency), the tiny classifier, and the
# metric body (its in-place clamp of the target is our stand-in for the metric's internal mutation).
import torch
import torch.nn as nn
import torch.nn.functional as F


def accuracy(pred, target, num_classes=None):
    num_classes = num_classes or pred.shape[1]
    labels = pred.argmax(dim=1)
    target.clamp_(0, num_classes - 1)
    return (labels == target).float().mean()


class LightningModuleStub(nn.Module):
    def configure_optimizers(self):
        raise NotImplementedError


class LitClassifier(LightningModuleStub):
    def __init__(self, in_dim=10, classes=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, 16), nn.ReLU(), nn.Linear(16, classes))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        y_hat = self(x)
        loss = F.cross_entropy(y_hat, y)
        acc = accuracy(y_hat, y)
        tensorboard_logs = {"train_loss": loss, "train_acc": acc}
        return {"loss": loss, "log": tensorboard_logs}

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


class Trainer:
    def __init__(self, max_steps=2):
        self.max_steps = max_steps

    def fit(self, module, batches):
        optimizer = module.configure_optimizers()
        for batch_idx, batch in enumerate(batches[: self.max_steps]):
            optimizer.zero_grad()
            output = module.training_step(batch, batch_idx)
            output["loss"].backward()
            optimizer.step()


if __name__ == "__main__":
    torch.manual_seed(0)
    batches = [(torch.randn(8, 10), torch.randint(0, 4, (8,))) for _ in range(2)]
    Trainer().fit(LitClassifier(), batches)
