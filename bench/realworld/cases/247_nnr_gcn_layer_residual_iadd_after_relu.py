# Thread: https://github.com/Veason-silverbullet/NNR/issues/3
# Title: "Bug report"
# Diagnosis from the thread: training the NNR news-recommendation models fails at loss.backward() in trainer.py
# with "one of the variables needed for gradient computation has been modified by an inplace operation ...
# output 0 of TBackward" on torch 1.10+, while it ran on 1.9. The maintainers traced it to layers.py (line
# 291): the GCN layer's residual connection `out += feature`, an in-place add on the output of F.relu, which
# relu saved for its backward. They changed it to `out = out + feature` (and fixed the same pattern in
# baseline models).
# Kept: GCNLayer (W applied to graph @ feature, optional LayerNorm, ReLU, residual add), GCN stacking layers
# with in-place dropout between them, an additive attention pooling, a news encoder over a word graph, a user
# encoder averaging clicked news, dot-product click scores and the softmax loss over candidates.
# Added: sizes, a random word graph and random token ids, one training step.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class GCNLayer(nn.Module):
    def __init__(self, in_dim, out_dim, residual=False, layer_norm=False):
        super().__init__()
        self.residual, self.layer_norm = residual, layer_norm
        self.W = nn.Linear(in_dim, out_dim, bias=True)
        if self.layer_norm:
            self.layer_normalization = nn.LayerNorm(normalized_shape=[out_dim])

    def forward(self, feature, graph):
        out = self.W(torch.bmm(graph, feature))
        if self.layer_norm:
            out = self.layer_normalization(out)
        out = F.relu(out)
        if self.residual:
            out += feature
        return out


class GCN(nn.Module):
    def __init__(self, in_dim, out_dim, hidden_dim, num_layers=2, dropout=0.1, residual=False, layer_norm=False):
        super().__init__()
        self.num_layers = num_layers
        self.dropout = nn.Dropout(dropout, inplace=True)
        dims = [in_dim] + [hidden_dim] * (num_layers - 1) + [out_dim]
        self.gcn_layers = nn.ModuleList(GCNLayer(dims[i], dims[i + 1], residual=residual, layer_norm=layer_norm)
                                        for i in range(num_layers))

    def forward(self, feature, graph):
        out = feature
        for i in range(self.num_layers - 1):
            out = self.dropout(self.gcn_layers[i](out, graph))
        return self.gcn_layers[-1](out, graph)


class Attention(nn.Module):
    def __init__(self, feature_dim, attention_dim):
        super().__init__()
        self.affine1 = nn.Linear(feature_dim, attention_dim)
        self.affine2 = nn.Linear(attention_dim, 1, bias=False)

    def forward(self, feature):
        alpha = F.softmax(self.affine2(torch.tanh(self.affine1(feature))).squeeze(2), dim=1)
        return torch.bmm(alpha.unsqueeze(1), feature).squeeze(1)


class NewsEncoder(nn.Module):
    def __init__(self, vocab_size=100, dim=32):
        super().__init__()
        self.word_embedding = nn.Embedding(vocab_size, dim)
        self.gcn = GCN(dim, dim, dim, num_layers=2, residual=True, layer_norm=True)
        self.attention = Attention(dim, 16)

    def forward(self, title, graph):
        return self.attention(self.gcn(self.word_embedding(title), graph))


def random_graph(n, length):
    adj = (torch.rand(n, length, length) > 0.7).float() + torch.eye(length)
    return adj / adj.sum(dim=2, keepdim=True)


if __name__ == "__main__":
    encoder = NewsEncoder()
    optimizer = torch.optim.Adam(encoder.parameters(), lr=1e-4)
    batch, history, candidates, length = 2, 3, 4, 10
    hist_titles = torch.randint(0, 100, (batch * history, length))
    cand_titles = torch.randint(0, 100, (batch * candidates, length))
    user = encoder(hist_titles, random_graph(batch * history, length)).view(batch, history, -1).mean(dim=1)
    news = encoder(cand_titles, random_graph(batch * candidates, length)).view(batch, candidates, -1)
    logits = torch.bmm(news, user.unsqueeze(2)).squeeze(2)
    loss = F.cross_entropy(logits, torch.zeros(batch, dtype=torch.long))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
