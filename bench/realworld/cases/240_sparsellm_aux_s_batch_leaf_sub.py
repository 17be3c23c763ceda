# Thread: https://github.com/BaiTheBest/SparseLLM/issues/13
# Title: "How to fix this problem?"
# Diagnosis from the thread: SparseLLM prunes an LLM's feed-forward blocks by alternating updates of the pruned
# weights and of auxiliary activation variables. The auxiliary variable `s` is refined by plain gradient
# descent over column chunks: a chunk is copied out as `s_batch` (float32, requires_grad), a loss is built from
# it and backpropagated, and then `s_batch -= s_learning_rate * s_batch.grad` fails with "a leaf Variable that
# requires grad is being used in an in-place operation". The maintainer's answer: replace that in-place update
# with the out-of-place `s_batch = s_batch - s_learning_rate * s_batch.grad`.
# Kept: the chunked update loop (copy a chunk of s, requires_grad, loss_s on the up-projection target and the
# down-projection reconstruction, backward, the in-place gradient step, grad.zero_(), write the detached chunk
# back into s as float16). Added: a small FFN layer with random calibration activations, sizes, the loss terms.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class FFN(nn.Module):
    def __init__(self, d_model=16, d_ff=32):
        super().__init__()
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)


def update_aux_s(ffn, inps, outs, s, alpha=5.0, beta=5.0, s_learning_rate=1e-2, num_chunks=2, steps=3):
    z = F.linear(inps, ffn.up_proj.weight).detach()          # what the pruned up-projection produces
    chunks = torch.arange(s.shape[1]).chunk(num_chunks)
    for chunk in chunks:
        for _ in range(steps):
            s_batch = s[:, chunk].float().clone().requires_grad_(True)
            full = s.float().clone()
            full[:, chunk] = s_batch
            recon = F.linear(F.gelu(full), ffn.down_proj.weight)
            loss_s = alpha * (s_batch - z[:, chunk]).pow(2).sum() + beta * (recon - outs).pow(2).sum()
            loss_s.backward()
            s_batch -= s_learning_rate * s_batch.grad
            s_batch.grad.zero_()
            s[:, chunk] = s_batch.detach().to(dtype=torch.float16)
    return s


if __name__ == "__main__":
    ffn = FFN()
    inps = torch.randn(64, 16)
    outs = torch.randn(64, 16)
    s = F.linear(inps, ffn.up_proj.weight).detach().to(torch.float16)
    update_aux_s(ffn, inps, outs, s)
