# Source: https://github.com/allenai/allennlp/issues/2530
# Title: "the bug of tensor.data of argumented_lstm"
# Diagnosis from the thread: AugmentedLstm steps through a length-sorted batch, computing only the still-active
# rows, and at every step rebuilds its full-batch state with `full_batch_previous_memory.data.clone()` /
# `full_batch_previous_state.data.clone()` before writing the active rows back; `.data` drops the history of the
# rows that are not rewritten, so the final state of every shorter sequence is cut from the graph and a
# classifier on the final state trains worse than with nn.LSTM, with no error. The reporter's fix removes
# `.data` (plain `.clone()`). Kept from the thread: AugmentedLstm's per-timestep loop (current_length_index,
# input/state linearities, gate chunks, memory and output update, the full-batch rebuild and slice writes,
# output_accumulator), the final-state classifier as in the IMDB use. Added: sizes, the length-sorted toy batch,
# the comparison with the `.clone()` fix.
import torch
import torch.nn as nn


class AugmentedLstm(nn.Module):
    def __init__(self, input_size, hidden_size, use_data=True):
        super().__init__()
        self.hidden_size = hidden_size
        self.input_linearity = nn.Linear(input_size, 4 * hidden_size, bias=False)
        self.state_linearity = nn.Linear(hidden_size, 4 * hidden_size, bias=True)
        self.use_data = use_data

    def forward(self, sequence_tensor, batch_lengths):
        batch_size, total_timesteps, _ = sequence_tensor.shape
        output_accumulator = sequence_tensor.new_zeros(batch_size, total_timesteps, self.hidden_size)
        full_batch_previous_memory = sequence_tensor.new_zeros(batch_size, self.hidden_size)
        full_batch_previous_state = sequence_tensor.new_zeros(batch_size, self.hidden_size)
        current_length_index = batch_size - 1
        for timestep in range(total_timesteps):
            index = timestep
            while batch_lengths[current_length_index] <= index:
                current_length_index -= 1
            previous_memory = full_batch_previous_memory[0: current_length_index + 1].clone()
            previous_state = full_batch_previous_state[0: current_length_index + 1].clone()
            timestep_input = sequence_tensor[0: current_length_index + 1, index]
            projected_input = self.input_linearity(timestep_input)
            projected_state = self.state_linearity(previous_state)
            i, f, g, o = (projected_input + projected_state).chunk(4, dim=1)
            input_gate, forget_gate, output_gate = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o)
            memory_init = torch.tanh(g)
            memory = input_gate * memory_init + forget_gate * previous_memory
            timestep_output = output_gate * torch.tanh(memory)
            # rebuild the full-batch state and write the active rows back
            if self.use_data:
                full_batch_previous_memory = full_batch_previous_memory.data.clone()
                full_batch_previous_state = full_batch_previous_state.data.clone()
            else:
                full_batch_previous_memory = full_batch_previous_memory.clone()
                full_batch_previous_state = full_batch_previous_state.clone()
            full_batch_previous_memory[0: current_length_index + 1] = memory
            full_batch_previous_state[0: current_length_index + 1] = timestep_output
            output_accumulator[0: current_length_index + 1, index] = timestep_output
        final_state = (full_batch_previous_state.unsqueeze(0), full_batch_previous_memory.unsqueeze(0))
        return output_accumulator, final_state


class Classifier(nn.Module):
    def __init__(self, use_data):
        super().__init__()
        self.encoder = AugmentedLstm(5, 6, use_data=use_data)
        self.head = nn.Linear(6, 2)

    def forward(self, x, lengths):
        _, (h, _) = self.encoder(x, lengths)
        return self.head(h[0])


def grads(use_data):
    torch.manual_seed(0)
    model = Classifier(use_data)
    x = torch.randn(4, 6, 5)
    lengths = [6, 5, 3, 2]  # sorted, as the wrapper requires
    labels = torch.tensor([0, 1, 1, 0])
    nn.functional.cross_entropy(model(x, lengths), labels).backward()
    return [p.grad for p in model.parameters()]


if __name__ == "__main__":
    buggy, fixed = grads(use_data=True), grads(use_data=False)
    same = all(torch.allclose(a, b) for a, b in zip(buggy, fixed))
    print("gradguard-case: gradients differ from the fix" if not same else "gradients match")
