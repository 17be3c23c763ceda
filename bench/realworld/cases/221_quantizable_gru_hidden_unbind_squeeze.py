# Source: https://github.com/alibaba/TinyNeuralNetwork/issues/238
# Title: "Output 0 of UnbindBackward0 is a view and is being modified inplace in GRU"
# Diagnosis from the thread: the quantizable GRU (written like torch.ao's quantizable LSTM) reshapes the incoming
# hidden state to (layers, directions, batch, hidden), unbinds it per layer and squeezes each piece in place
# (`hx[idx].squeeze_(0)`); when the hidden state comes out of the traced model's graph (a fake-quant output that
# requires grad), the pieces are views returned by unbind and the in-place squeeze is refused. An out-of-place
# `squeeze(0)` avoids it. Kept from the thread: the quantizable GRU's forward (batch_first transpose, zeros when
# hidden is None, reshape + unbind + in-place squeeze, per-layer loop, stack of final states), a traced model
# that feeds a computed initial hidden state (fake-quant stand-in) into it. Added: the per-layer cell built from
# nn.GRUCell, sizes, the keyword-spotting style head and loss.
import torch
import torch.nn as nn
from torch import Tensor


class GRULayer(nn.Module):
    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.cell = nn.GRUCell(input_size, hidden_size)

    def forward(self, x, hx):
        hx = hx.squeeze(0) if hx.dim() == 3 else hx
        outputs = []
        for t in range(x.size(0)):
            hx = self.cell(x[t], hx)
            outputs.append(hx)
        return torch.stack(outputs), hx


class QuantizableGRU(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers=1, batch_first=False, bidirectional=False):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.batch_first = batch_first
        self.bidirectional = bidirectional
        sizes = [input_size] + [hidden_size] * (num_layers - 1)
        self.layers = nn.ModuleList([GRULayer(s, hidden_size) for s in sizes])

    def forward(self, x, hidden=None):
        if self.batch_first:
            x = x.transpose(0, 1)
        max_batch_size = x.size(1)
        num_directions = 2 if self.bidirectional else 1
        if hidden is None:
            zeros = torch.zeros(num_directions, max_batch_size, self.hidden_size, dtype=torch.float)
            zeros.squeeze_(0)
            hx = [zeros for _ in range(self.num_layers)]
        else:
            if isinstance(hidden, Tensor):
                hx = hidden.reshape(self.num_layers, num_directions, max_batch_size, self.hidden_size).unbind(0)
                hx = [(hx[idx].squeeze_(0)) for idx in range(self.num_layers)]
            else:
                hx = hidden
        hx_list = []
        for idx, layer in enumerate(self.layers):
            x, h = layer(x, hx[idx])
            hx_list.append(h)
        hx_tensor = torch.stack(hx_list)
        hx_tensor = hx_tensor.reshape(-1, hx_tensor.shape[-2], hx_tensor.shape[-1])
        if self.batch_first:
            x = x.transpose(0, 1)
        return x, hx_tensor


class FakeQuantize(nn.Module):
    def __init__(self, scale=0.05):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        # straight-through rounding, as a QAT fake-quant does
        return x + (torch.round(x / self.scale) * self.scale - x).detach()


class CRNNKwsModel(nn.Module):
    def __init__(self, n_mels=8, hidden=6, layers=2, classes=3):
        super().__init__()
        self.conv = nn.Conv1d(n_mels, hidden, 3, padding=1)
        self.init_state = nn.Linear(n_mels, layers * hidden)
        self.fake_quant_2 = FakeQuantize()
        self.kws_predictor_rnn = QuantizableGRU(hidden, hidden, num_layers=layers, batch_first=True)
        self.fc = nn.Linear(hidden, classes)
        self.layers, self.hidden = layers, hidden

    def forward(self, mels):
        reshape_0_f = torch.relu(self.conv(mels)).transpose(1, 2)
        h0 = self.init_state(mels.mean(-1)).view(mels.size(0), self.layers, self.hidden).transpose(0, 1)
        fake_quant_2 = self.fake_quant_2(h0)
        kws_predictor_rnn = self.kws_predictor_rnn(reshape_0_f, fake_quant_2)
        return self.fc(kws_predictor_rnn[0][:, -1])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = CRNNKwsModel()
    mels = torch.randn(2, 8, 5)
    loss = nn.functional.cross_entropy(model(mels), torch.tensor([0, 2]))
    loss.backward()
    print("ok")
