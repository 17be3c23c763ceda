# Source: https://github.com/helpmefindaname/transformer-smaller-training-vocab/pull/3
# Title: "Update Optimizer Parameters"
# Thread: `reduce_train_vocab(model=..., tokenizer=..., texts=...)` swaps the transformer's word
# embeddings for a smaller embedding that only holds the tokens used in the training texts, and
# restores the full vocabulary on exit. When the optimizer was created beforehand
# (`optimizer = Adam(model.parameters())` then the context manager), it still holds the old embedding
# parameter, so the new word embeddings are never updated. The PR adds an `optimizer=` argument that
# puts the new embedding parameter into the parameter group the old one was in.
# Kept: an HF-style model with get_input_embeddings()/set_input_embeddings() and a config, a tokenizer
# whose ids are remapped to the reduced vocabulary, the context manager that swaps the embedding in and
# writes the trained rows back on exit, and an optimizer created before entering it. Added: a tiny
# model, the training step inside the context, and the comparison of the gradients the optimizer sees.
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class TinyConfig:
    vocab_size: int = 40
    hidden_size: int = 6
    num_labels: int = 2


class TinyModelForSequenceClassification(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def get_input_embeddings(self):
        return self.word_embeddings

    def set_input_embeddings(self, value):
        self.word_embeddings = value

    def forward(self, input_ids, labels):
        logits = self.classifier(self.get_input_embeddings()(input_ids).mean(dim=1))
        return F.cross_entropy(logits, labels)


@contextmanager
def reduce_train_vocab(model, token_ids, optimizer=None):
    used = torch.unique(token_ids)
    old_embeddings = model.get_input_embeddings()
    new_embeddings = nn.Embedding(len(used), old_embeddings.embedding_dim)
    with torch.no_grad():
        new_embeddings.weight.copy_(old_embeddings.weight[used])
    model.set_input_embeddings(new_embeddings)
    if optimizer is not None:
        for group in optimizer.param_groups:
            group["params"] = [new_embeddings.weight if p is old_embeddings.weight else p for p in group["params"]]
    remap = {int(t): i for i, t in enumerate(used)}
    try:
        yield lambda ids: ids.clone().apply_(lambda t: remap[t])
    finally:
        with torch.no_grad():
            old_embeddings.weight[used] = new_embeddings.weight
        model.set_input_embeddings(old_embeddings)


def seen_by_optimizer(optimizer):
    return [
        torch.zeros_like(p) if p.grad is None else p.grad.clone()
        for group in optimizer.param_groups
        for p in group["params"]
    ]


def train_with_optimizer(model, optimizer, token_ids, labels):
    with reduce_train_vocab(model, token_ids) as encode:
        optimizer.zero_grad()
        model(encode(token_ids), labels).backward()
        grads = seen_by_optimizer(optimizer)
        optimizer.step()
    return grads


def train_with_optimizer_fixed(model, optimizer, token_ids, labels):
    with reduce_train_vocab(model, token_ids, optimizer=optimizer) as encode:
        optimizer.zero_grad()
        model(encode(token_ids), labels).backward()
        grads = seen_by_optimizer(optimizer)
        optimizer.step()
    return grads


def run(train_fn, token_ids, labels):
    torch.manual_seed(0)
    model = TinyModelForSequenceClassification(TinyConfig())
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    return train_fn(model, optimizer, token_ids, labels)


if __name__ == "__main__":
    torch.manual_seed(0)
    token_ids, labels = torch.randint(0, 40, (4, 5)), torch.tensor([0, 1, 1, 0])
    g_bug = run(train_with_optimizer, token_ids, labels)
    g_fix = run(train_with_optimizer_fixed, token_ids, labels)
    same = all(a.shape == b.shape and torch.allclose(a, b) for a, b in zip(g_bug, g_fix))
    if not same:
        print("gradguard-case: gradients differ from the fix")
