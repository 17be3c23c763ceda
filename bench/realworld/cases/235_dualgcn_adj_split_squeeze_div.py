# Source: https://github.com/CCChenhao997/DualGCN-ABSA/issues/4
# Title: "Issues in dualgcn_bert.py"
# Diagnosis from the thread: DualGCN averages the per-head aspect-aware attention maps into a semantic adjacency
# matrix: it splits the multi-head attention tensor with torch.split, squeezes each piece, starts adj_ag from the
# first piece and then divides in place, `adj_ag /= self.attention_heads`; adj_ag is a view of an output of
# split (a function returning several views), so the in-place division is refused. The answer: `adj_ag = adj_ag
# / self.attention_heads`. Kept from the thread: the GCN-BERT encoder step computing attention scores with a
# masked scaled dot product, the split/squeeze list of per-head adjacency matrices, the averaging loop, the
# in-place division, the GCN layer using adj_ag. Added: a small token encoder instead of BERT, sizes, the
# aspect-pooling classifier and loss.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiHeadAttention(nn.Module):
    def __init__(self, h, d_model):
        super().__init__()
        self.d_k = d_model // h
        self.h = h
        self.linears = nn.ModuleList([nn.Linear(d_model, d_model) for _ in range(2)])

    def forward(self, query, key, mask=None):
        nbatches = query.size(0)
        query, key = [l(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
                      for l, x in zip(self.linears, (query, key))]
        scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask.unsqueeze(1) == 0, -1e9)
        return F.softmax(scores, dim=-1)


class GCNBert(nn.Module):
    def __init__(self, vocab=30, bert_dim=16, mem_dim=8, attention_heads=1, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, bert_dim)  # stands in for BERT's sequence output
        self.attention_heads = attention_heads
        self.attn = MultiHeadAttention(attention_heads, bert_dim)
        self.wa = nn.ModuleList([nn.Linear(bert_dim if i == 0 else mem_dim, mem_dim) for i in range(layers)])

    def forward(self, text_bert_indices, src_mask):
        outputs = self.embed(text_bert_indices)
        attn_tensor = self.attn(outputs, outputs, src_mask.unsqueeze(-2))
        attn_adj_list = [attn_adj.squeeze(1) for attn_adj in torch.split(attn_tensor, 1, dim=1)]
        adj_ag = None
        # Average Aspect-aware Attention scores
        for i in range(self.attention_heads):
            if adj_ag is None:
                adj_ag = attn_adj_list[i]
            else:
                adj_ag += attn_adj_list[i]
        adj_ag /= self.attention_heads
        denom_ag = adj_ag.sum(2).unsqueeze(2) + 1
        gcn_inputs = outputs
        for layer in self.wa:
            ax = adj_ag.bmm(gcn_inputs)
            gcn_inputs = F.relu(layer(ax) / denom_ag)
        return gcn_inputs, adj_ag


class DualGCNBertClassifier(nn.Module):
    def __init__(self, polarities=3):
        super().__init__()
        self.gcn = GCNBert()
        self.classifier = nn.Linear(8, polarities)

    def forward(self, text_bert_indices, src_mask, aspect_mask):
        h, adj_ag = self.gcn(text_bert_indices, src_mask)
        aspect = (h * aspect_mask.unsqueeze(-1)).sum(1) / aspect_mask.sum(1, keepdim=True)
        return self.classifier(aspect), adj_ag


if __name__ == "__main__":
    torch.manual_seed(0)
    model = DualGCNBertClassifier()
    tokens = torch.randint(1, 30, (2, 6))
    src_mask = torch.ones(2, 6)
    aspect_mask = torch.tensor([[0, 1, 1, 0, 0, 0], [0, 0, 0, 1, 0, 0]], dtype=torch.float)
    logits, _ = model(tokens, src_mask, aspect_mask)
    F.cross_entropy(logits, torch.tensor([0, 2])).backward()
    print("ok")
