# Source: https://github.com/keras-team/keras/issues/23462
# Title: "Torch backend: stateful GRU using cuDNN fails during backward due to an in-place state update"
# Diagnosis from the thread: a stateful recurrent layer hands its state variable to the fused GRU as the
# initial hidden state, then writes the new final state back into that same variable in place
# (Variable.assign -> copy_); the fused kernel saved the initial state for backward, so backward finds it at
# version 1. Kept from the thread: a stateful layer that owns a state variable, assigns the new state after
# the call, and a plain `loss.backward()` right after the first call. Added: a tiny Variable wrapper standing
# in for the framework's variable class, nn.GRU on CPU, shapes (batch 2, time 3, features 4, units 5).
import torch
import torch.nn as nn


class BackendVariable:
    """Minimal stand-in for a framework variable backed by a torch tensor."""

    def __init__(self, initial):
        self._value = initial

    @property
    def value(self):
        return self._value

    def assign(self, new_value):
        with torch.no_grad():
            self._value.copy_(new_value)


class StatefulGRU(nn.Module):
    def __init__(self, features, units, batch_size):
        super().__init__()
        self.units = units
        self.gru = nn.GRU(features, units, batch_first=True)
        self.states = [BackendVariable(torch.zeros(1, batch_size, units))]

    def reset_states(self):
        for s in self.states:
            s.assign(torch.zeros_like(s.value))

    def forward(self, inputs):
        initial_state = self.states[0].value
        outputs, last_state = self.gru(inputs, initial_state)
        self.states[0].assign(last_state)
        return outputs[:, -1]


if __name__ == "__main__":
    torch.manual_seed(0)
    layer = StatefulGRU(features=4, units=5, batch_size=2)
    inputs = torch.randn(2, 3, 4)
    layer(inputs).sum().backward()
    print("ok")
