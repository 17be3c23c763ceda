# Source: https://github.com/scverse/scvi-tools/issues/214
# Title: "scVI training does not play nicely with other torch code"
# Thread: the module `scvi.inference.trainer` calls `torch.set_grad_enabled(False)` at import time
# (module level), which silently turns off graph building for any other torch code that runs after
# `import scvi.inference`; the user's own model then cannot backpropagate. The reporter recommended
# annotating the inference functions with `@torch.no_grad` instead, and the maintainers removed the
# global switch (while their own training loop re-enables grad locally, so scVI itself kept working).
# Kept: a package whose inference/trainer.py disables grad globally at import, a trainer whose own
# loop re-enables grad, and user code that imports the package and then trains its own torch model.
# Added: package layout (inference / models / main), a tiny VAE, the user's training loop.
import torch
import torch.nn as nn
import torch.nn.functional as F

from .inference import UnsupervisedTrainer  # noqa: F401  (imported for its latent-space helpers)
from .models import VAE


def train_user_classifier(steps=2):
    torch.manual_seed(0)
    clf = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(clf.parameters(), lr=0.1)
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(clf(x), y)
        loss.backward()
        opt.step()


def main():
    vae = VAE()
    UnsupervisedTrainer(vae).train([torch.randn(8, 6)])
    train_user_classifier()


if __name__ == "__main__":
    main()
