# Source: https://www.codetd.com/en/article/17161119
# Title: "[Backward solution and principle] There is a variable version number mechanism error in the network model
# during gradient update" (blog post)
# Diagnosis from the post: a hierarchical multi-label classifier runs BERT once, predicts the level-1 label,
# writes that label's tokens into the last positions of the *same* input-id and mask tensors
# (`context[:, -3:] = extra`, `mask[:, -3:] = 1`) and runs BERT again; the first pass saved those inputs for
# backward (the embedding lookup keeps its indices), so the in-place rewrite makes backward fail. The fix is to
# clone the inputs before rewriting them. Kept from the post: forward(x, label_A_emb) taking (context, _, mask),
# two passes through one encoder with fc1 / fc2 on the pooled output, idx from logit1.data, extra =
# label_A_emb[idx]. Added: a tiny BERT-like encoder returning (sequence_output, pooled_output), sizes, the batch.
import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyBert(nn.Module):
    """Returns (sequence_output, pooled_output) like a HF BertModel called positionally."""

    def __init__(self, vocab=50, dim=16, heads=2):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim)
        self.position_embeddings = nn.Embedding(32, dim)
        self.layer = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True)
        self.pooler = nn.Linear(dim, dim)

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.size(1)).unsqueeze(0)
        h = self.word_embeddings(input_ids) + self.position_embeddings(positions)
        h = self.layer(h, src_key_padding_mask=attention_mask.eq(0))
        return h, torch.tanh(self.pooler(h[:, 0]))


class HierarchicalClassifier(nn.Module):
    def __init__(self, label_a_num=4, label_b_num=6, dim=16):
        super().__init__()
        self.bert = TinyBert(dim=dim)
        self.fc1 = nn.Linear(dim, label_a_num)
        self.fc2 = nn.Linear(dim, label_b_num)

    def forward(self, x, label_A_emb):
        context = x[0]  # input sentence ids
        mask = x[2]
        d1 = self.bert(context, attention_mask=mask)
        logit1 = self.fc1(d1[1])
        idx = torch.max(logit1.data, 1)[1]
        extra = label_A_emb[idx]
        context[:, -3:] = extra
        mask[:, -3:] = 1
        d2 = self.bert(context, attention_mask=mask)
        logit2 = self.fc2(d2[1])
        return logit1, logit2


if __name__ == "__main__":
    torch.manual_seed(0)
    model = HierarchicalClassifier()
    label_A_emb = torch.randint(1, 50, (4, 3))  # token ids describing each level-1 label
    context = torch.randint(1, 50, (2, 10))
    context[:, -3:] = 0
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[:, -3:] = 0
    x = (context, None, mask)
    logit1, logit2 = model(x, label_A_emb)
    loss = F.cross_entropy(logit1, torch.tensor([1, 2])) + F.cross_entropy(logit2, torch.tensor([0, 5]))
    loss.backward()
    print("ok")
