# Thread: https://github.com/pytorch/examples/pull/779
# Title: "[word_language_model] Fix grad in-place operation"
# Diagnosis from the thread: the word-level language model example trains without an optimizer: after
# loss.backward() and gradient clipping it updates every parameter by hand with `p.add_(-lr, p.grad)`. That
# in-place add on a parameter (a leaf that requires grad) raises "a leaf Variable that requires grad is being
# used in an in-place operation". The PR's fix (merged) applies the update through p.data (the usual
# alternative being torch.no_grad()); a follow-up comment points at the same line in the regression example.
# Kept: RNNModel (embedding, LSTM, dropout, decoder), batchify/get_batch over a token stream, truncated BPTT
# with repackage_hidden detaching the hidden state between chunks, clip_grad_norm_, the manual SGD loop.
# Added: a random corpus and small sizes; the update uses add_'s current signature (alpha=-lr).
import torch
import torch.nn as nn

torch.manual_seed(0)


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        return self.decoder(self.drop(output)).view(-1, self.decoder.out_features), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


def train(model, train_data, ntokens, lr=20.0, bptt=8, clip=0.25, batch_size=4):
    model.train()
    criterion = nn.NLLLoss()
    hidden = model.init_hidden(batch_size)
    for i in range(0, train_data.size(0) - 1, bptt):
        data, targets = get_batch(train_data, i, bptt)
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(torch.log_softmax(output, dim=-1), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.add_(p.grad, alpha=-lr)


if __name__ == "__main__":
    ntokens = 50
    corpus = torch.randint(0, ntokens, (200,))
    model = RNNModel(ntokens, ninp=16, nhid=16, nlayers=2)
    train(model, batchify(corpus, 4), ntokens)
