# Source: https://github.com/williamSYSU/TextGAN-PyTorch/pull/69
# Title: "Update relational_rnn_general.py"
# Diagnosis from the thread: the relational memory core (RMC, used as the RelGAN generator) splits the projected
# memory into q, k, v with torch.split(..., [key_size, key_size, value_size]) and scales the queries in place,
# `q *= key_size ** -0.5`; q is one output of split_with_sizes, and PyTorch refuses in-place changes to such views
# ("Output 0 of SplitWithSizesBackward0 is a view and is being modified inplace"). The PR scales out of place.
# Kept from the thread: RelationalMemory with its multihead_attention (qkv projector + layernorm, view/permute to
# heads, split with sizes, in-place scaling), attend_over_memory, create_gates, forward_step with the gated memory
# update, forward with repackage_hidden over the time loop, initial_state. Added: sizes, a token embedding and an
# output head for a language-model style step, the loss.
import torch
from torch import nn
import torch.nn.functional as F


class RelationalMemory(nn.Module):
    def __init__(self, mem_slots, head_size, input_size, num_heads=1, num_blocks=1, forget_bias=1.0,
                 input_bias=0.0, attention_mlp_layers=2, return_all_outputs=True):
        super().__init__()
        self.mem_slots, self.head_size, self.num_heads = mem_slots, head_size, num_heads
        self.mem_size = head_size * num_heads
        self.mem_slots_plus_input = mem_slots + 1
        self.num_blocks = num_blocks
        self.key_size = head_size
        self.value_size = head_size
        self.qkv_size = 2 * self.key_size + self.value_size
        self.total_qkv_size = self.qkv_size * num_heads
        self.qkv_projector = nn.Linear(self.mem_size, self.total_qkv_size)
        self.qkv_layernorm = nn.LayerNorm([self.mem_slots_plus_input, self.total_qkv_size])
        self.attention_mlp = nn.ModuleList([nn.Linear(self.mem_size, self.mem_size)] * attention_mlp_layers)
        self.attended_memory_layernorm = nn.LayerNorm([self.mem_slots_plus_input, self.mem_size])
        self.attended_memory_layernorm2 = nn.LayerNorm([self.mem_slots_plus_input, self.mem_size])
        self.input_projector = nn.Linear(input_size, self.mem_size)
        self.num_gates = 2 * self.mem_size
        self.input_gate_projector = nn.Linear(self.mem_size, self.num_gates)
        self.memory_gate_projector = nn.Linear(self.mem_size, self.num_gates)
        self.forget_bias = nn.Parameter(torch.tensor(forget_bias))
        self.input_bias = nn.Parameter(torch.tensor(input_bias))
        self.return_all_outputs = return_all_outputs

    def repackage_hidden(self, h):
        return h.detach() if isinstance(h, torch.Tensor) else tuple(self.repackage_hidden(v) for v in h)

    def initial_state(self, batch_size):
        init_state = torch.stack([torch.eye(self.mem_slots) for _ in range(batch_size)])
        if self.mem_size > self.mem_slots:
            init_state = torch.cat([init_state, torch.zeros(batch_size, self.mem_slots, self.mem_size - self.mem_slots)], -1)
        return init_state

    def multihead_attention(self, memory):
        qkv = self.qkv_layernorm(self.qkv_projector(memory))
        mem_slots = memory.shape[1]
        qkv_reshape = qkv.view(qkv.shape[0], mem_slots, self.num_heads, self.qkv_size)
        qkv_transpose = qkv_reshape.permute(0, 2, 1, 3)
        q, k, v = torch.split(qkv_transpose, [self.key_size, self.key_size, self.value_size], -1)
        # scale q with d_k, the dimensionality of the key vectors
        q *= (self.key_size ** -0.5)
        weights = F.softmax(torch.matmul(q, k.permute(0, 1, 3, 2)), dim=-1)
        output = torch.matmul(weights, v)
        output_transpose = output.permute(0, 2, 1, 3).contiguous()
        return output_transpose.view((output_transpose.shape[0], output_transpose.shape[1], -1))

    def create_gates(self, inputs, memory):
        memory = torch.tanh(memory)
        inputs = inputs.view(inputs.shape[0], -1)
        gate_inputs = self.input_gate_projector(inputs).unsqueeze(dim=1)
        gate_memory = self.memory_gate_projector(memory)
        gates = gate_memory + gate_inputs
        input_gate, forget_gate = torch.split(gates, int(gates.shape[2] / 2), dim=2)
        input_gate = torch.sigmoid(input_gate + self.input_bias)
        forget_gate = torch.sigmoid(forget_gate + self.forget_bias)
        return input_gate, forget_gate

    def attend_over_memory(self, memory):
        for _ in range(self.num_blocks):
            attended_memory = self.multihead_attention(memory)
            memory = self.attended_memory_layernorm(memory + attended_memory)
            attention_mlp = memory
            for i, l in enumerate(self.attention_mlp):
                attention_mlp = F.relu(self.attention_mlp[i](attention_mlp))
            memory = self.attended_memory_layernorm2(memory + attention_mlp)
        return memory

    def forward_step(self, inputs, memory):
        inputs = self.input_projector(inputs.view(inputs.shape[0], -1))
        inputs_reshape = inputs.unsqueeze(dim=1)
        memory_plus_input = torch.cat([memory, inputs_reshape], dim=1)
        next_memory = self.attend_over_memory(memory_plus_input)
        next_memory = next_memory[:, :-inputs_reshape.shape[1], :]
        input_gate, forget_gate = self.create_gates(inputs_reshape, memory)
        next_memory = input_gate * torch.tanh(next_memory) + forget_gate * memory
        return next_memory.view(next_memory.shape[0], -1), next_memory

    def forward(self, inputs, memory):
        memory = self.repackage_hidden(memory)
        logits = []
        for idx_step in range(inputs.shape[1]):
            logit, memory = self.forward_step(inputs[:, idx_step], memory)
            logits.append(logit.unsqueeze(1))
        return torch.cat(logits, dim=1), memory


if __name__ == "__main__":
    torch.manual_seed(0)
    vocab, emb = 20, 6
    embeddings = nn.Embedding(vocab, emb)
    rmc = RelationalMemory(mem_slots=1, head_size=4, input_size=emb, num_heads=2)
    lm_head = nn.Linear(rmc.mem_slots * rmc.mem_size, vocab)
    tokens = torch.randint(0, vocab, (3, 5))
    hidden = rmc.initial_state(batch_size=3)
    out, hidden = rmc(embeddings(tokens[:, :-1]), hidden)
    loss = F.cross_entropy(lm_head(out).reshape(-1, vocab), tokens[:, 1:].reshape(-1))
    loss.backward()
    print("ok")
