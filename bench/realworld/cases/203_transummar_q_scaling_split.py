# Source: https://github.com/lipiji/TranSummar/issues/19
# Title: "Train Error: RuntimeError: Output 0 of SplitBackward0 is a view and is being modified inplace."
# Diagnosis from the thread: the self-attention layer projects the input once, splits it into q, k, v with
# chunk(3), then scales q with `q *= self.scaling`; q is one of several views returned by chunk, so recent
# torch refuses the in-place multiply (fix: `q = q * self.scaling`). Kept from the thread: a fairseq-style
# MultiheadAttention with a packed in_proj weight, the chunk(3) split, the in-place scaling, a Transformer
# layer calling it with a padding mask, and an encoder looping over layers. Added: sizes, the toy batch.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0):
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.dropout = dropout
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * embed_dim))
        self.out_proj = nn.Linear(embed_dim, embed_dim)
        nn.init.normal_(self.in_proj_weight, std=0.02)

    def forward(self, query, key, value, key_padding_mask=None):
        tgt_len, bsz, embed_dim = query.size()
        q, k, v = F.linear(query, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        q *= self.scaling
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, -1)
            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2), float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, -1)
        attn_weights = F.softmax(attn_weights, dim=-1)
        attn_weights = F.dropout(attn_weights, p=self.dropout, training=self.training)
        attn = torch.bmm(attn_weights, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        return self.out_proj(attn), attn_weights


class TransformerLayer(nn.Module):
    def __init__(self, embed_dim, ff_embed_dim, num_heads, dropout):
        super().__init__()
        self.self_attn = MultiheadAttention(embed_dim, num_heads, dropout)
        self.fc1 = nn.Linear(embed_dim, ff_embed_dim)
        self.fc2 = nn.Linear(ff_embed_dim, embed_dim)
        self.attn_layer_norm = nn.LayerNorm(embed_dim)
        self.ff_layer_norm = nn.LayerNorm(embed_dim)
        self.dropout = dropout

    def forward(self, x, self_padding_mask=None):
        residual = x
        x, self_attn = self.self_attn(query=x, key=x, value=x, key_padding_mask=self_padding_mask)
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = self.attn_layer_norm(residual + x)
        residual = x
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        x = self.ff_layer_norm(residual + x)
        return x, self_attn


class Encoder(nn.Module):
    def __init__(self, vocab, embed_dim, layers, heads):
        super().__init__()
        self.tok = nn.Embedding(vocab, embed_dim, padding_idx=0)
        self.layers = nn.ModuleList([TransformerLayer(embed_dim, 2 * embed_dim, heads, 0.1) for _ in range(layers)])
        self.scale = math.sqrt(embed_dim)

    def forward(self, tokens):
        padding_mask = tokens.eq(0).transpose(0, 1)
        x = self.tok(tokens) * self.scale
        for layer in self.layers:
            x, _ = layer(x, self_padding_mask=padding_mask)
        return x


if __name__ == "__main__":
    torch.manual_seed(0)
    enc = Encoder(vocab=20, embed_dim=8, layers=2, heads=2)
    tokens = torch.tensor([[3, 5], [7, 2], [4, 0], [9, 0]])
    enc(tokens).sum().backward()
    print("ok")
