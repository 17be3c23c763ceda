# Source: https://github.com/pytorch/pytorch/issues/165621
# Title: "Feedback about RNN"
# Diagnosis from the thread (and its fix, PR #173888): the pure-Python forward shown as nn.RNN's reference
# implementation keeps the per-layer hidden state in one tensor and writes each layer's new state into it in
# place (`h_t[layer] = torch.tanh(...)`); the next layer reads `h_t[layer - 1]` as its input and matmul saves
# that slice, so the following write makes backward fail. The fix builds each time step's states in a list and
# stacks them. Kept from the thread: the reference forward (params taken from an nn.RNN's named_parameters,
# h_t_minus_1 / h_t clones, the per-layer tanh update, output.append(h_t[-1].clone())), the driver with a
# target of ones and MSE. Added: smaller sizes.
import torch
import torch.nn as nn

torch.manual_seed(0)
rnn = nn.RNN(4, 6, 2)
params = dict(rnn.named_parameters())


def forward(x, hx=None, batch_first=False):
    if batch_first:
        x = x.transpose(0, 1)
    seq_len, batch_size, _ = x.size()
    if hx is None:
        hx = torch.zeros(rnn.num_layers, batch_size, rnn.hidden_size)
    h_t_minus_1 = hx.clone()
    h_t = hx.clone()
    output = []
    for t in range(seq_len):
        for layer in range(rnn.num_layers):
            input_t = x[t] if layer == 0 else h_t[layer - 1]
            h_t[layer] = torch.tanh(
                input_t @ params[f"weight_ih_l{layer}"].T
                + h_t_minus_1[layer] @ params[f"weight_hh_l{layer}"].T
                + params[f"bias_hh_l{layer}"]
                + params[f"bias_ih_l{layer}"]
            )
        output.append(h_t[-1].clone())
        h_t_minus_1 = h_t.clone()
    output = torch.stack(output)
    if batch_first:
        output = output.transpose(0, 1)
    return output, h_t


if __name__ == "__main__":
    input = torch.randn(5, 3, 4)
    h0 = torch.randn(2, 3, 6)
    output, hn = forward(input, h0)
    target = torch.ones_like(output)
    loss = nn.functional.mse_loss(output, target)
    loss.backward()
    print("ok")
