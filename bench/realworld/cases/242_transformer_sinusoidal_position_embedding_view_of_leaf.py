# Thread: https://github.com/Atcold/NYU-DLSP20/issues/765
# Title: "RuntimeError: a view of a leaf Variable that requires grad is being used in an in-place operation."
# Diagnosis from the thread: building the course notebook's TransformerClassifier fails in
# create_sinusoidal_embeddings(): it is handed the position nn.Embedding's weight (a leaf that requires grad) and
# fills its even and odd columns by slice assignment, `E[:, 0::2] = torch.FloatTensor(np.sin(...))`, before
# detaching it. The reporter found (and asked about) the two remedies: clone the leaf or do the fill under
# torch.no_grad() - the positions are computed, not learned; the maintainer notes older torch accepted it.
# Kept: create_sinusoidal_embeddings with the numpy theta table and the 0::2 / 1::2 slice writes followed by
# detach_() and requires_grad=False, Embeddings (word + position + LayerNorm) calling it from __init__, a
# multi-head self-attention encoder layer and the classifier head over the max-pooled sequence.
# Added: small sizes, a random batch and one training step after construction.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def create_sinusoidal_embeddings(nb_p, dim, E):
    theta = np.array([[p / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for p in range(nb_p)])
    E[:, 0::2] = torch.FloatTensor(np.sin(theta[:, 0::2]))
    E[:, 1::2] = torch.FloatTensor(np.cos(theta[:, 1::2]))
    E.detach_()
    E.requires_grad = False


class Embeddings(nn.Module):
    def __init__(self, d_model, vocab_size, max_position_embeddings, p):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, d_model, padding_idx=1)
        self.position_embeddings = nn.Embedding(max_position_embeddings, d_model)
        create_sinusoidal_embeddings(nb_p=max_position_embeddings, dim=d_model,
                                     E=self.position_embeddings.weight)
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-12)

    def forward(self, input_ids):
        seq_length = input_ids.size(1)
        position_ids = torch.arange(seq_length, dtype=torch.long).unsqueeze(0).expand_as(input_ids)
        return self.layer_norm(self.word_embeddings(input_ids) + self.position_embeddings(position_ids))


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads, self.d_k = num_heads, d_model // num_heads
        self.W_q, self.W_k, self.W_v = (nn.Linear(d_model, d_model) for _ in range(3))
        self.W_h = nn.Linear(d_model, d_model)

    def split_heads(self, x, batch_size):
        return x.view(batch_size, -1, self.num_heads, self.d_k).transpose(1, 2)

    def forward(self, x):
        batch_size = x.size(0)
        Q, K, V = (self.split_heads(W(x), batch_size) for W in (self.W_q, self.W_k, self.W_v))
        A = F.softmax(Q @ K.transpose(-2, -1) / np.sqrt(self.d_k), dim=-1)
        H = (A @ V).transpose(1, 2).contiguous().view(batch_size, -1, self.num_heads * self.d_k)
        return self.W_h(H)


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, conv_hidden_dim):
        super().__init__()
        self.mha = MultiHeadAttention(d_model, num_heads)
        self.cnn = nn.Sequential(nn.Linear(d_model, conv_hidden_dim), nn.ReLU(), nn.Linear(conv_hidden_dim, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x):
        out1 = self.norm1(x + self.mha(x))
        return self.norm2(out1 + self.cnn(out1))


class TransformerClassifier(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, conv_hidden_dim, input_vocab_size, num_answers,
                 max_position_encoding=64):
        super().__init__()
        self.embedding = Embeddings(d_model, input_vocab_size, max_position_encoding, p=0.1)
        self.layers = nn.ModuleList([EncoderLayer(d_model, num_heads, conv_hidden_dim) for _ in range(num_layers)])
        self.dense = nn.Linear(d_model, num_answers)

    def forward(self, x):
        x = self.embedding(x)
        for layer in self.layers:
            x = layer(x)
        x, _ = torch.max(x, dim=1)
        return self.dense(x)


if __name__ == "__main__":
    model = TransformerClassifier(num_layers=1, d_model=32, num_heads=2, conv_hidden_dim=64,
                                  input_vocab_size=500, num_answers=2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    tokens, labels = torch.randint(0, 500, (4, 20)), torch.randint(0, 2, (4,))
    loss = F.cross_entropy(model(tokens), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
