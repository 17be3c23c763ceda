# Thread: https://github.com/graviraja/MLOps-Basics/issues/14
# Title: "Is training happening?"
# Diagnosis from the thread: the course's LightningModule (week 0, a CoLA sentence-acceptability classifier)
# computes the loss in training_step and passes it to self.log, but never returns it. Lightning only runs
# backward and the optimizer step on what training_step returns; with None it warns and skips the batch, so the
# model never trains while the logged loss looks normal. The maintainer's first reply (logging is enough) was
# corrected by the reporter, with Lightning's docs and a reproduction, and he fixed it by returning the loss.
# Kept: a ColaModel-style LightningModule (encoder + classification head, training_step computing
# cross-entropy on the [CLS]-position output and logging it, configure_optimizers with Adam), a Trainer whose
# automatic optimisation backpropagates only the returned loss. Added: a small embedding/GRU encoder in place of
# the pretrained transformer, a minimal Trainer and logger (Lightning is not a dependency here), random batches,
# and the gradient comparison with the training_step that returns the loss.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class LightningModuleLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.logged = {}

    def log(self, name, value, prog_bar=False):
        self.logged[name] = float(value)


class ColaModel(LightningModuleLike):
    def __init__(self, vocab_size=100, hidden=32, lr=1e-2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, hidden)
        self.encoder = nn.GRU(hidden, hidden, batch_first=True)
        self.W = nn.Linear(hidden, 2)
        self.num_classes, self.lr = 2, lr

    def forward(self, input_ids, attention_mask):
        outputs, _ = self.encoder(self.embedding(input_ids) * attention_mask.unsqueeze(-1))
        return self.W(outputs[:, 0, :])

    def training_step(self, batch, batch_idx):
        logits = self.forward(batch["input_ids"], batch["attention_mask"])
        loss = F.cross_entropy(logits, batch["label"])
        self.log("train_loss", loss, prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class ColaModelFixed(ColaModel):
    def training_step(self, batch, batch_idx):
        logits = self.forward(batch["input_ids"], batch["attention_mask"])
        loss = F.cross_entropy(logits, batch["label"])
        self.log("train_loss", loss, prog_bar=True)
        return loss


class Trainer:
    """Automatic optimisation as Lightning does it: backward and step only on a returned loss."""

    def fit_one_batch(self, model, batch):
        optimizer = model.configure_optimizers()
        optimizer.zero_grad()
        out = model.training_step(batch, 0)
        loss = out["loss"] if isinstance(out, dict) else out
        if loss is not None:
            loss.backward()
        grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]
        if loss is not None:
            optimizer.step()
        return grads


if __name__ == "__main__":
    batch = {"input_ids": torch.randint(0, 100, (8, 12)), "attention_mask": torch.ones(8, 12),
             "label": torch.randint(0, 2, (8,))}
    buggy, fixed = ColaModel(), ColaModelFixed()
    fixed.load_state_dict(buggy.state_dict())
    g_bug = Trainer().fit_one_batch(buggy, batch)
    g_fix = Trainer().fit_one_batch(fixed, batch)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
