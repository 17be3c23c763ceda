# Source: https://github.com/keras-team/keras/pull/20916
# Title: "Fix PyTorch stateful RNN/LSTM gradient computation error resolves #20875"
# Diagnosis from the thread: with the PyTorch backend and stateful=True, the recurrent layer starts from the
# tensors held by its state variables and, after the time loop, writes the final (h, c) back into those same
# tensors with Variable.assign (an in-place copy_); the LSTM step saved h_tm1 (recurrent matmul) and c_tm1
# (forget-gate product) for backward, so training a stateful LSTM fails at loss.backward(). The PR copies the
# states at the start of the step so that the tensors autograd saved are never written. Kept from the thread:
# the split between a torch-backed Variable with assign, the generic RNN layer (inner_loop/step, stateful
# state variables assigned after the loop) and the LSTM cell reading states[0], states[1]. Added: this small
# package layout, sizes, the fit loop over two batches with an optimizer.
import torch

from .layers import LSTM


class Sequential(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = LSTM(input_dim=3, units=4, stateful=True)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.rnn(x))


def fit(model, batches, lr=1e-2):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Sequential()
    batches = [(torch.randn(2, 5, 3), torch.randn(2, 1)) for _ in range(2)]
    fit(model, batches)
    print("ok")
