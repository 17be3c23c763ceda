# Source: https://github.com/pytorch/pytorch/issues/49236
# Title: "detach_() does not perform in-place detachment from the computation graph"
# Diagnosis from the thread: to get truncated BPTT with a fixed window the user keeps the per-step hidden states
# and calls `.detach_()` on the state that falls out of the window, expecting gradients to stop there; but
# detach_() only changes how the tensor is seen by *future* operations - the steps already computed from it keep
# their graph (in 2020 backward silently ran through the whole sequence; torch 2.13 now refuses to use a saved
# tensor that was detached in place). Truncation has to happen when the state is handed to the next step
# (`h = h.detach()` every k steps). Kept from the thread: the recurrent loop, the per-step loss, the in-place
# detach of the state leaving the window after it was used. Added: a GRUCell model, sizes, the driver.
import torch
import torch.nn as nn


class Seq(nn.Module):
    def __init__(self, n_in=3, n_hidden=5):
        super().__init__()
        self.cell = nn.GRUCell(n_in, n_hidden)
        self.head = nn.Linear(n_hidden, 1)


def run(model, x, y, trunc, detach_in_place):
    model.zero_grad()
    h = torch.zeros(x.shape[1], model.cell.hidden_size)
    states = []
    loss = 0.0
    for t in range(x.shape[0]):
        if not detach_in_place and t > 0 and t % trunc == 0:
            h = h.detach()  # fix: cut the history before the state is used again
        h = model.cell(x[t], h)
        states.append(h)
        if detach_in_place and t >= trunc:
            states[t - trunc].detach_()  # meant to drop the graph older than `trunc` steps
        loss = loss + (model.head(h) - y[t]).pow(2).mean()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Seq()
    x = torch.randn(8, 2, 3)
    y = torch.randn(8, 2, 1)
    grads = run(model, x, y, trunc=2, detach_in_place=True)
    print("ok")
