# Source: https://github.com/NVIDIA/Megatron-LM/pull/1594
# Title: "bugfix: cross_entropy inplace operations may cause backward error"
# Thread: the vocab-parallel cross-entropy autograd.Function starts its forward with
# `vocab_parallel_logits = vocab_parallel_logits.float()` and then subtracts the max in place. For
# logits that are already float32, `.float()` returns the same tensor, so the in-place ops rewrite
# the caller's logits; when those logits are also used by another computation that saved them, backward
# fails. The fix clones float32 logits before the in-place work.
# Kept: the Function shape (float() then `-=` max, exp, sum, saved softmax; backward builds the grad
# from the saved softmax and the target). Added: a tiny LM head, a z-loss (logsumexp of the same
# logits, which saves them) as the "other computation", and the training-step driver.
import torch
import torch.nn as nn


class VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, vocab_parallel_logits, target):
        vocab_parallel_logits = vocab_parallel_logits.float()
        logits_max = vocab_parallel_logits.max(dim=-1, keepdim=True)[0]
        vocab_parallel_logits -= logits_max
        exp_logits = vocab_parallel_logits.exp()
        sum_exp_logits = exp_logits.sum(dim=-1, keepdim=True)
        predicted_logits = vocab_parallel_logits.gather(-1, target.unsqueeze(-1))
        loss = (sum_exp_logits.log() - predicted_logits).squeeze(-1)
        softmax = exp_logits / sum_exp_logits
        ctx.save_for_backward(softmax, target)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target = ctx.saved_tensors
        grad_input = softmax.clone()
        grad_input.scatter_add_(-1, target.unsqueeze(-1), -torch.ones_like(softmax[..., :1]))
        return grad_input * grad_output.unsqueeze(-1), None


class TinyLM(nn.Module):
    def __init__(self, vocab=11, hidden=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.lm_head = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        return self.lm_head(torch.tanh(self.embed(tokens)))


def train_step(model, optimizer, tokens, labels, z_loss_weight=1e-2):
    optimizer.zero_grad()
    logits = model(tokens)
    z_loss = torch.logsumexp(logits, dim=-1).pow(2).mean()
    ce = VocabParallelCrossEntropy.apply(logits, labels).mean()
    (ce + z_loss_weight * z_loss).backward()
    optimizer.step()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 11, (6,))
    labels = torch.randint(0, 11, (6,))
    train_step(model, optimizer, tokens, labels)
