# Thread: https://github.com/kanyun-inc/fairseq-gec/issues/45
# Title: "bash train.sh got error"
# Diagnosis from the thread: training the copy-augmented GEC transformer fails in the forward with "Output 0 of
# SplitBackward0 is a view and is being modified inplace". fairseq's (2019) MultiheadAttention projects the
# packed q/k/v with one matmul and takes them as chunks of it (in_proj_qkv: `.chunk(3, dim=-1)`), then scales the
# query in place, `q *= self.scaling`; chunk's outputs are multi-output views that must not be written in
# place. The answer (pointing at issue #41): replace `q *= self.scaling` with `q = q * self.scaling`.
# Kept: MultiheadAttention with the packed in_proj_weight/in_proj_bias, in_proj_qkv / in_proj_q / in_proj_kv
# through _in_proj(start, end), the qkv_same / kv_same dispatch, the (bsz*heads, tgt, head_dim) reshapes and bmm
# attention with the key-padding mask filled out-of-place, a post-norm encoder layer, the copy attention of the
# decoder over the encoder output (kv_same). Added: sizes, token embeddings, one encoder and one decoder layer,
# a toy batch with a label-smoothed loss and one Adam step.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class MultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True):
        super().__init__()
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim ** -0.5
        self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim)) if bias else None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        nn.init.xavier_uniform_(self.in_proj_weight)
        if self.in_proj_bias is not None:
            nn.init.constant_(self.in_proj_bias, 0.0)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=False):
        qkv_same = query.data_ptr() == key.data_ptr() == value.data_ptr()
        kv_same = key.data_ptr() == value.data_ptr()
        tgt_len, bsz, embed_dim = query.size()
        if qkv_same:
            q, k, v = self.in_proj_qkv(query)
        elif kv_same:
            q = self.in_proj_q(query)
            k, v = self.in_proj_kv(key)
        else:
            q, k, v = self.in_proj_q(query), self.in_proj_k(key), self.in_proj_v(value)
        q *= self.scaling

        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        src_len = k.size(1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        if key_padding_mask is not None:
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights = F.softmax(attn_weights.float(), dim=-1).type_as(attn_weights)
        attn_weights = F.dropout(attn_weights, p=self.dropout, training=self.training)
        attn = torch.bmm(attn_weights, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        attn = self.out_proj(attn)
        if need_weights:
            return attn, attn_weights.view(bsz, self.num_heads, tgt_len, src_len).sum(dim=1) / self.num_heads
        return attn, None

    def in_proj_qkv(self, query):
        return self._in_proj(query).chunk(3, dim=-1)

    def in_proj_kv(self, key):
        return self._in_proj(key, start=self.embed_dim).chunk(2, dim=-1)

    def in_proj_q(self, query):
        return self._in_proj(query, end=self.embed_dim)

    def in_proj_k(self, key):
        return self._in_proj(key, start=self.embed_dim, end=2 * self.embed_dim)

    def in_proj_v(self, value):
        return self._in_proj(value, start=2 * self.embed_dim)

    def _in_proj(self, input, start=0, end=None):
        weight = self.in_proj_weight[start:end, :]
        bias = self.in_proj_bias[start:end] if self.in_proj_bias is not None else None
        return F.linear(input, weight, bias)


class EncoderLayer(nn.Module):
    def __init__(self, dim, heads, ffn):
        super().__init__()
        self.self_attn = MultiheadAttention(dim, heads)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.fc1, self.fc2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)

    def forward(self, x, padding_mask):
        residual = x
        x, _ = self.self_attn(x, x, x, key_padding_mask=padding_mask)
        x = self.norm1(residual + x)
        residual = x
        x = self.fc2(F.relu(self.fc1(x)))
        return self.norm2(residual + x)


class CopyDecoderLayer(nn.Module):
    """Self-attention over the target, then copy attention over the encoder output (its weights are the copy
    distribution the GEC model mixes with the generator's)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.self_attn = MultiheadAttention(dim, heads)
        self.copy_attn = MultiheadAttention(dim, 1)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, y, enc_out, enc_mask):
        residual = y
        y, _ = self.self_attn(y, y, y)
        y = self.norm1(residual + y)
        residual = y
        y, copy_scores = self.copy_attn(y, enc_out, enc_out, key_padding_mask=enc_mask, need_weights=True)
        return self.norm2(residual + y), copy_scores


class CopyTransformer(nn.Module):
    def __init__(self, vocab=30, dim=16, heads=4, ffn=32, pad=0):
        super().__init__()
        self.pad = pad
        self.embed = nn.Embedding(vocab, dim, padding_idx=pad)
        self.encoder = EncoderLayer(dim, heads, ffn)
        self.decoder = CopyDecoderLayer(dim, heads)
        self.gen = nn.Linear(dim, vocab)
        self.alpha = nn.Linear(dim, 1)

    def forward(self, src, prev_out):
        enc_mask = src.eq(self.pad)
        enc_out = self.encoder(self.embed(src).transpose(0, 1), enc_mask)
        dec, copy_scores = self.decoder(self.embed(prev_out).transpose(0, 1), enc_out, enc_mask)
        dec = dec.transpose(0, 1)
        gen_probs = F.softmax(self.gen(dec), dim=-1)
        copy_probs = torch.zeros_like(gen_probs).scatter_add(
            -1, src[:, None, :].expand(-1, dec.size(1), -1), copy_scores)
        alpha = torch.sigmoid(self.alpha(dec))
        return torch.log((1 - alpha) * gen_probs + alpha * copy_probs + 1e-9)


if __name__ == "__main__":
    model = CopyTransformer()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    src = torch.randint(1, 30, (3, 7))
    src[0, -2:] = 0
    tgt = torch.randint(1, 30, (3, 6))
    prev = torch.cat([torch.full((3, 1), 2), tgt[:, :-1]], dim=1)
    lprobs = model(src, prev)
    loss = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), tgt.view(-1), ignore_index=0)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
