import torch
import torch.nn as nn

from .rnn import RNN


class LSTMCell(nn.Module):
    def __init__(self, input_dim, units):
        super().__init__()
        self.units = units
        self.state_size = [units, units]
        self.kernel = nn.Parameter(torch.randn(input_dim, 4 * units) * 0.3)
        self.recurrent_kernel = nn.Parameter(torch.randn(units, 4 * units) * 0.3)
        self.bias = nn.Parameter(torch.zeros(4 * units))

    def forward(self, inputs, states):
        h_tm1 = states[0]  # previous memory state
        c_tm1 = states[1]  # previous carry state
        z = inputs @ self.kernel + h_tm1 @ self.recurrent_kernel + self.bias
        z0, z1, z2, z3 = torch.split(z, self.units, dim=1)
        i = torch.sigmoid(z0)
        f = torch.sigmoid(z1)
        c = f * c_tm1 + i * torch.tanh(z2)
        o = torch.sigmoid(z3)
        h = o * torch.tanh(c)
        return h, [h, c]


class LSTM(RNN):
    def __init__(self, input_dim, units, stateful=False, return_sequences=False):
        super().__init__(LSTMCell(input_dim, units), stateful=stateful, return_sequences=return_sequences)
