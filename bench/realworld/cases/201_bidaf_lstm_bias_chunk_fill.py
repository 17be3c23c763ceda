# Source: https://github.com/galsang/BiDAF-pytorch/issues/30
# Title: "reset_params of class LSTM reports error"
# Diagnosis from the thread: the LSTM wrapper's reset_params sets the forget-gate slice of each bias_hh to 1
# by taking `bias.chunk(4)[1]` and calling fill_ on it; chunk returns several views of the bias parameter,
# and torch refuses an in-place write through one of them (the fix is to do it under torch.no_grad(), or to
# index the bias directly). Kept from the thread: a BiDAF-style LSTM wrapper with reset_params looping over
# layers and reading `bias_hh_l{i}` with getattr, the chunk(4)[1].fill_(1) forget-gate init. Added: sizes,
# a one-batch driver.
import torch
import torch.nn as nn


class LSTM(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers=1, bidirectional=False, dropout=0.2):
        super().__init__()
        self.rnn = nn.LSTM(input_size=input_size, hidden_size=hidden_size, num_layers=num_layers,
                           bidirectional=bidirectional, batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.reset_params()

    def reset_params(self):
        for i in range(self.rnn.num_layers):
            nn.init.orthogonal_(getattr(self.rnn, f"weight_hh_l{i}"))
            nn.init.kaiming_normal_(getattr(self.rnn, f"weight_ih_l{i}"))
            nn.init.constant_(getattr(self.rnn, f"bias_hh_l{i}"), val=0)
            nn.init.constant_(getattr(self.rnn, f"bias_ih_l{i}"), val=0)
            getattr(self.rnn, f"bias_hh_l{i}").chunk(4)[1].fill_(1)

    def forward(self, x):
        x = self.dropout(x)
        out, _ = self.rnn(x)
        return out


if __name__ == "__main__":
    torch.manual_seed(0)
    encoder = LSTM(input_size=6, hidden_size=4, num_layers=2)
    context = torch.randn(3, 5, 6)
    encoder(context).sum().backward()
    print("ok")
