# Thread: https://github.com/pytorch/pytorch/issues/148835
# Title: "[Inductor] Error detected in ReluBackward0"
# Diagnosis from the thread: a model run through torch.compile (Inductor) fails with "Error detected in
# ReluBackward0 ... modified by an inplace operation". Its forward applies F.relu and then F.relu_ to the result.
# The maintainer's answer: relu saves its result for backward, and calling relu_ on the output of the previous
# relu mutates that saved tensor - not allowed, and eager fails on the same code at backward(). Under
# torch.compile the error surfaces while compiling, at the forward call. Fix: drop the in-place relu_ (or use
# the out-of-place relu).
# Kept: a Linear followed by F.relu and F.relu_ in forward, the model compiled with torch.compile.
# Added: a small classifier head around that block, a random batch and a training step as the driver.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class SimpleModel(nn.Module):
    def __init__(self, d_in=10, d_hidden=10, n_classes=3):
        super().__init__()
        self.linear = nn.Linear(d_in, d_hidden)
        self.head = nn.Linear(d_hidden, n_classes)

    def forward(self, x):
        x = self.linear(x)
        x = F.relu(x)
        x = F.relu_(x)
        return self.head(x)


if __name__ == "__main__":
    model = torch.compile(SimpleModel())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, labels = torch.randn(4, 10), torch.randint(0, 3, (4,))
    loss = F.cross_entropy(model(inputs), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
