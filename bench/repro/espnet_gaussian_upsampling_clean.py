"""espnet 202511, espnet2/s2st/synthesizer/translatotron2.py:196 (gradguard GG102, warning): FALSE, shown clean here.

`GaussianUpsampling.forward` computes the logits `w_t = -0.5 * (log(2 pi) + log(vars) + (t - c)**2 / vars)`,
then masks the padded phonemes with `w_t.data.masked_fill_(masks, -1e15)` and applies
`F.softmax(w_t, dim=1)`.  gradguard says the backward "differentiates the values as if they were never
changed (wrong gradients)".  But nothing saved `w_t` before the write (its producers, a scalar `*` and a
`+`, save no output), softmax reads it only after the write, and softmax's gradient at the filled entries
is exactly 0 (their probabilities are exp(-1e15) = 0): the gradients are identical, bit for bit, to
those of the out-of-place `w_t = w_t.masked_fill(masks, -1e15)`.

The module imports the rest of espnet, so `forward` and `get_mask_from_lengths` are copied faithfully
from translatotron2.py:161-210 (only the `.data` line is made switchable).

    python bench/repro/espnet_gaussian_upsampling_clean.py     # exits 0 when the gradients are identical
"""

import numpy as np
import torch
import torch.nn.functional as F


def get_mask_from_lengths(lengths, max_len=None):  # translatotron2.py:205
    if max_len is None:
        max_len = max(lengths)
    ids = np.arange(0, max_len)
    mask = ids < lengths.reshape(-1, 1)
    return mask


def gaussian_upsampling(encoder_outputs, durations, vars, input_lengths=None, data_write=True):  # :161
    mask_score = -1e15
    batch_size = encoder_outputs.size(0)
    hidden_length = encoder_outputs.size(1)
    frame_length = int(torch.sum(durations, dim=1).max().item())
    c = torch.cumsum(durations, dim=1).float() - 0.5 * durations
    c = c.unsqueeze(2)
    t = torch.arange(frame_length, device=encoder_outputs.device).expand(batch_size, hidden_length, frame_length).float()
    vars = vars.view(batch_size, -1, 1)
    w_t = -0.5 * (np.log(2.0 * np.pi) + torch.log(vars) + torch.pow(t - c, 2) / vars)
    if input_lengths is not None:
        input_masks = ~get_mask_from_lengths(input_lengths, hidden_length)
        input_masks = torch.tensor(input_masks, dtype=torch.bool, device=w_t.device)
        masks = input_masks.unsqueeze(2)
        if data_write:
            w_t.data.masked_fill_(masks, mask_score)  # line 196, espnet's code
        else:
            w_t = w_t.masked_fill(masks, mask_score)  # the out-of-place form, as the graph op
    w_t = F.softmax(w_t, dim=1)
    return torch.bmm(w_t.transpose(1, 2), encoder_outputs)


def grads(data_write):
    torch.manual_seed(0)
    enc = torch.randn(2, 7, 4, requires_grad=True)
    durations = (torch.rand(2, 7) * 3 + 1).requires_grad_()
    vars = (torch.rand(2, 7) + 0.5).requires_grad_()
    lengths = np.array([7, 4])  # the second utterance has 3 padded phonemes
    out = gaussian_upsampling(enc, durations, vars, lengths, data_write=data_write)
    (out * torch.randn(out.shape, generator=torch.Generator().manual_seed(1))).sum().backward()
    return out.detach(), enc.grad, durations.grad, vars.grad


ref, mine = grads(data_write=False), grads(data_write=True)
for name, a, b in zip(["output", "encoder_outputs.grad", "durations.grad", "vars.grad"], ref, mine):
    assert torch.equal(a, b), name
    print(f"{name}: identical to the out-of-place masked_fill's")
print("no error, and the .data write's gradients are the graph op's: nothing wrong")
