import torch
import torch.nn as nn

from ..variables import Variable


class RNN(nn.Module):
    """Generic recurrent layer: loops a cell over time, optionally keeping its state between calls."""

    def __init__(self, cell, stateful=False, return_sequences=False):
        super().__init__()
        self.cell = cell
        self.stateful = stateful
        self.return_sequences = return_sequences
        self.states = None

    def build(self, batch_size):
        if self.stateful and self.states is None:
            self.states = [Variable(torch.zeros(batch_size, size)) for size in self.cell.state_size]

    def get_initial_state(self, batch_size):
        return [torch.zeros(batch_size, size) for size in self.cell.state_size]

    def inner_loop(self, sequences, initial_state):
        def step(inputs, states):
            output, new_states = self.cell(inputs, states)
            return output, new_states

        states = initial_state
        outputs = []
        for t in range(sequences.shape[1]):
            output, states = step(sequences[:, t], states)
            outputs.append(output)
        return outputs[-1], torch.stack(outputs, dim=1), states

    def forward(self, sequences):
        batch_size = sequences.shape[0]
        self.build(batch_size)
        if self.stateful:
            initial_state = [v.value for v in self.states]
        else:
            initial_state = self.get_initial_state(batch_size)
        last_output, outputs, states = self.inner_loop(sequences, initial_state)
        if self.stateful:
            for self_state, state in zip(self.states, states):
                self_state.assign(state)
        return outputs if self.return_sequences else last_output

    def reset_states(self):
        if self.states is not None:
            for v in self.states:
                v.assign(torch.zeros_like(v.value))
