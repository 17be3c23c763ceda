# Source: https://github.com/pytorch/pytorch/issues/31819
# Title: "A strange issue about detection of tensor in-place modification"
# Diagnosis from the thread: a pure-PyTorch CTC fills its log-alpha table row by row in place; the hand-written
# `logadd` (max / exp / log of slices of the table) saves those slices for backward, so writing the next row
# bumps the table's version and backward fails (torch.logsumexp over a stacked copy happened to save a copy,
# which is why that variant "worked"). The fix is to keep each step's alphas in a list and stack them instead
# of writing into one preallocated table. Kept from the thread: CTC forward recursion over the extended label
# sequence, the custom three-way logadd, the in-place writes `log_alpha[t] = ...`, gradient taken with
# torch.autograd.grad w.r.t. the logits. Added: sizes, random targets, a single-utterance batch layout.
import torch
import torch.nn.functional as F


def logadd(x0, x1, x2):
    # custom three-way log-sum-exp (faster than torch.logsumexp on CPU)
    m = torch.max(torch.max(x0, x1), x2)
    m = m.masked_fill(torch.isinf(m), 0)
    return m + torch.log(torch.exp(x0 - m) + torch.exp(x1 - m) + torch.exp(x2 - m))


def ctc_loss(log_probs, targets, blank=0):
    # log_probs: (T, B, C), targets: (B, L)
    T, B, C = log_probs.shape
    ext = torch.full((B, 2 * targets.shape[1] + 1), blank, dtype=torch.long)
    ext[:, 1::2] = targets
    S = ext.shape[1]
    emit = log_probs.gather(2, ext.unsqueeze(0).expand(T, B, S))
    same = torch.cat([torch.ones(B, 2, dtype=torch.bool), ext[:, 2:] == ext[:, :-2]], dim=1)
    neg_inf = torch.tensor(float("-inf"))

    log_alpha = torch.full((T, B, S), float("-inf"))
    log_alpha[0, :, :2] = emit[0, :, :2]
    for t in range(1, T):
        prev = log_alpha[t - 1]
        shift1 = torch.cat([neg_inf.expand(B, 1), prev[:, :-1]], dim=1)
        shift2 = torch.cat([neg_inf.expand(B, 2), prev[:, :-2]], dim=1)
        shift2 = torch.where(same, neg_inf, shift2)
        log_alpha[t] = emit[t] + logadd(prev, shift1, shift2)
    last = log_alpha[-1]
    return -torch.logsumexp(torch.stack([last[:, -1], last[:, -2]]), dim=0)


if __name__ == "__main__":
    torch.manual_seed(0)
    T, B, C, L = 6, 2, 5, 2
    logits = torch.randn(T, B, C, requires_grad=True)
    targets = torch.randint(1, C, (B, L))
    custom_ctc = ctc_loss(F.log_softmax(logits, dim=-1), targets)
    custom_ctc_grad, = torch.autograd.grad(custom_ctc.sum(), logits, retain_graph=True)
    print("ok", custom_ctc_grad.shape)
