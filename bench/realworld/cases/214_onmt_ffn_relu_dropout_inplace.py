# Source: https://github.com/OpenNMT/OpenNMT-py/pull/764
# Title: "Fix #761"
# Diagnosis from the thread: the Transformer's position-wise feed-forward applies nn.ReLU(inplace=True) and then
# nn.Dropout(dropout, inplace=True) to the same tensor; ReLU saved its output for backward and the in-place
# dropout overwrites it, so PyTorch 0.4+ raises at backward (ReLU + in-place dropout is not special-cased).
# The fix makes the first dropout out of place. Kept from the thread: OpenNMT's PositionwiseFeedForward
# (pre-norm w_1 -> relu -> dropout_1 -> w_2 -> dropout_2, residual), a Transformer encoder layer using it.
# Added: the attention sublayer via nn.MultiheadAttention, sizes, the toy batch.
import torch
import torch.nn as nn


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout_1 = nn.Dropout(dropout, inplace=True)
        self.relu = nn.ReLU(inplace=True)
        self.dropout_2 = nn.Dropout(dropout)

    def forward(self, x):
        inter = self.dropout_1(self.relu(self.w_1(self.layer_norm(x))))
        output = self.dropout_2(self.w_2(inter))
        return output + x


class TransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, dropout):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, heads, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)
        self.dropout = nn.Dropout(dropout)

    def forward(self, inputs, mask):
        input_norm = self.layer_norm(inputs)
        context, _ = self.self_attn(input_norm, input_norm, input_norm, key_padding_mask=mask)
        out = self.dropout(context) + inputs
        return self.feed_forward(out)


class TransformerEncoder(nn.Module):
    def __init__(self, num_layers, d_model, heads, d_ff, dropout, vocab):
        super().__init__()
        self.embeddings = nn.Embedding(vocab, d_model, padding_idx=0)
        self.transformer = nn.ModuleList([TransformerEncoderLayer(d_model, heads, d_ff, dropout)
                                          for _ in range(num_layers)])
        self.layer_norm = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, src):
        out = self.embeddings(src)
        mask = src.eq(0).transpose(0, 1)
        for layer in self.transformer:
            out = layer(out, mask)
        return self.layer_norm(out)


if __name__ == "__main__":
    torch.manual_seed(0)
    encoder = TransformerEncoder(num_layers=2, d_model=8, heads=2, d_ff=16, dropout=0.1, vocab=20)
    src = torch.tensor([[4, 7], [5, 3], [9, 0]])
    encoder(src).pow(2).mean().backward()
    print("ok")
