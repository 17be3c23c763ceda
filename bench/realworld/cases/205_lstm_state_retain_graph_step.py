# Source: https://blog.youkuaiyun.com/windhawk_fly/article/details/143405685
# Title: LSTM training: "Trying to backward through the graph a second time", then an in-place error after
# adding retain_graph=True (blog post)
# Diagnosis from the post: (h0, c0) returned by the LSTM are fed into the next batch without being detached,
# so each backward reaches into the previous batch's graph; retain_graph=True only hides the first error, and
# the second backward then meets weights that optimizer.step() has already updated in place. The fix is to
# detach the carried state (h0, c0 = h0.detach(), c0.detach()) and drop retain_graph. Kept from the post: an
# LSTM wrapper called as lstm(batch, h0, c0), states reassigned from its output each batch, backward with
# retain_graph=True, optimizer.step() each batch. Added: the toy next-vector dataset, sizes.
import torch
import torch.nn as nn


class LSTMModel(nn.Module):
    def __init__(self, embedding_dim, hidden_dim, num_layers):
        super().__init__()
        self.lstm = nn.LSTM(embedding_dim, hidden_dim, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_dim, embedding_dim)

    def forward(self, x, h0, c0):
        out, (hn, cn) = self.lstm(x, (h0, c0))
        return self.fc(out), (hn, cn)


def make_loader(n_batches, batch_size, seq_len, embedding_dim):
    data = torch.randn(n_batches, batch_size, seq_len + 1, embedding_dim)
    return [(b[:, :-1], b[:, 1:]) for b in data]


if __name__ == "__main__":
    torch.manual_seed(0)
    EPOCH, batch_size, embedding_dim, hidden_dim, num_layers = 1, 4, 6, 8, 1
    lstm = LSTMModel(embedding_dim, hidden_dim, num_layers)
    optimizer = torch.optim.Adam(lstm.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    data_loader = make_loader(3, batch_size, 5, embedding_dim)
    for epoch in range(EPOCH):
        batch_num = 0
        h0 = torch.randn((num_layers, batch_size, hidden_dim), requires_grad=False)
        c0 = torch.randn((num_layers, batch_size, hidden_dim), requires_grad=False)
        for batch in data_loader:
            optimizer.zero_grad()
            output, (h0, c0) = lstm(batch[0], h0, c0)
            loss = loss_fn(output.reshape(-1, embedding_dim), batch[1].reshape(-1, embedding_dim))
            loss.backward(retain_graph=True)
            optimizer.step()
            batch_num += 1
    print("ok")
