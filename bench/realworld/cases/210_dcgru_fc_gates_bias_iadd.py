# Source: https://github.com/Rose-STL-Lab/torchTS/issues/50
# Title: "Inplace operation in fully-connected reset and update gates"
# Diagnosis from the thread (and its fix, PR #59): with use_gc_for_ru=False the DCGRU cell computes its reset
# and update gates with `_fc`, which applies sigmoid to x @ W and then adds the bias in place (`value += biases`);
# sigmoid saved its output for backward, so the in-place add makes backward fail. The fix drops the inner
# sigmoid and adds the bias out of place. Kept from the thread: the DCRNN-style DCGRUCell with `_fc` and
# `_gconv` (diffusion over a support matrix), the ru gates split into r, u, and the stacked DCGRU layers.
# Added: a dense random-walk support instead of the sparse one, sizes, a two-step rollout and an MSE loss.
import torch
from torch import nn


class DCGRUCell(nn.Module):
    def __init__(self, num_units, adj_mx, max_diffusion_step, num_nodes, input_dim, use_gc_for_ru=True):
        super().__init__()
        self._num_nodes = num_nodes
        self._num_units = num_units
        self._max_diffusion_step = max_diffusion_step
        self._use_gc_for_ru = use_gc_for_ru
        support = adj_mx / adj_mx.sum(dim=1, keepdim=True)
        self.register_buffer("_supports", support.T.unsqueeze(0))
        num_matrices = self._supports.shape[0] * max_diffusion_step + 1
        input_size_gconv = (num_units + input_dim) * num_matrices
        input_size_ru = input_size_gconv if use_gc_for_ru else num_units + input_dim
        self._ru_weights = nn.Parameter(torch.empty(input_size_ru, 2 * num_units))
        self._ru_biases = nn.Parameter(torch.full((2 * num_units,), 1.0))
        self._gconv_weights = nn.Parameter(torch.empty(input_size_gconv, num_units))
        self._gconv_biases = nn.Parameter(torch.zeros(num_units))
        nn.init.xavier_normal_(self._ru_weights)
        nn.init.xavier_normal_(self._gconv_weights)

    def forward(self, inputs, hx):
        fn = self._gconv if self._use_gc_for_ru else self._fc
        output_size = 2 * self._num_units
        value = torch.sigmoid(fn(inputs, hx, output_size, reset=True))
        value = torch.reshape(value, (-1, self._num_nodes, output_size))
        r, u = torch.split(value, self._num_units, dim=-1)
        r = torch.reshape(r, (-1, self._num_nodes * self._num_units))
        u = torch.reshape(u, (-1, self._num_nodes * self._num_units))
        c = torch.tanh(self._gconv(inputs, r * hx, self._num_units))
        return u * hx + (1.0 - u) * c

    def _fc(self, inputs, state, output_size, reset=True):
        batch_size = inputs.shape[0]
        inputs = torch.reshape(inputs, (batch_size * self._num_nodes, -1))
        state = torch.reshape(state, (batch_size * self._num_nodes, -1))
        inputs_and_state = torch.cat([inputs, state], dim=-1)
        value = torch.sigmoid(torch.matmul(inputs_and_state, self._ru_weights))
        value += self._ru_biases
        return value

    def _gconv(self, inputs, state, output_size, reset=False):
        batch_size = inputs.shape[0]
        shape = (batch_size, self._num_nodes, -1)
        x = torch.cat([torch.reshape(inputs, shape), torch.reshape(state, shape)], dim=2)
        input_size = x.size(2)
        x0 = torch.reshape(x.permute(1, 2, 0), (self._num_nodes, input_size * batch_size))
        xs = [x0]
        for support in self._supports:
            x1 = support @ x0
            xs.append(x1)
            for _ in range(2, self._max_diffusion_step + 1):
                x2 = 2 * (support @ x1) - x0
                xs.append(x2)
                x1, x0 = x2, x1
        x = torch.stack(xs)
        x = torch.reshape(x, (len(xs), self._num_nodes, input_size, batch_size)).permute(3, 1, 2, 0)
        x = torch.reshape(x, (batch_size * self._num_nodes, input_size * len(xs)))
        weights, biases = (self._ru_weights, self._ru_biases) if reset else (self._gconv_weights, self._gconv_biases)
        x = torch.matmul(x, weights) + biases
        return torch.reshape(x, (batch_size, self._num_nodes * output_size))


class DCGRU(nn.Module):
    def __init__(self, num_layers, num_units, adj_mx, max_diffusion_step, num_nodes, input_dim, use_gc_for_ru=True):
        super().__init__()
        self.layers = nn.ModuleList(
            DCGRUCell(num_units, adj_mx, max_diffusion_step, num_nodes, input_dim if i == 0 else num_units,
                      use_gc_for_ru=use_gc_for_ru)
            for i in range(num_layers))

    def forward(self, inputs, hidden_state):
        hidden_states = []
        output = inputs
        for i, layer in enumerate(self.layers):
            output = layer(output, hidden_state[i])
            hidden_states.append(output)
        return output, torch.stack(hidden_states)


if __name__ == "__main__":
    torch.manual_seed(0)
    num_nodes, num_units, input_dim, batch = 4, 3, 2, 2
    adj_mx = torch.rand(num_nodes, num_nodes) + torch.eye(num_nodes)
    model = DCGRU(2, num_units, adj_mx, max_diffusion_step=2, num_nodes=num_nodes, input_dim=input_dim,
                  use_gc_for_ru=False)
    hidden = torch.zeros(2, batch, num_nodes * num_units)
    x = torch.randn(3, batch, num_nodes * input_dim)
    for t in range(x.shape[0]):
        out, hidden = model(x[t], hidden)
    (out ** 2).mean().backward()
    print("ok")
