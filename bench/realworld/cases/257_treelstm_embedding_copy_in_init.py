# Thread: https://github.com/dasguptar/treelstm.pytorch/pull/26
# Title: "Fix RuntimeError: a leaf Variable that requires grad has been used in…"
# Diagnosis from the thread: when the port to PyTorch 0.4 removed every `.data`, SimilarityTreeLSTM.__init__ was
# left copying the pretrained GloVe vectors into its embedding with `self.emb.weight.copy_(init_emb)`. With the
# embedding trainable (not --freeze_embed) the weight is a leaf that requires grad and the copy raises at model
# construction. The maintainer: "When switching to PyTorch 0.4.0, I hurriedly removed all .data, and this was a
# mistake"; the merged fix copies the vectors outside the graph (model.emb.weight.data.copy_(emb) in main.py).
# Kept: the Child-Sum Tree-LSTM (node_forward with the iou split and per-child forget gates, recursion over
# the children), the Similarity head on the two root states, SimilarityTreeLSTM taking the embedding matrix and
# the freeze flag, main() building the vocabulary embeddings and the model. Added: a tiny Tree class, random
# "GloVe" vectors, two toy trees and a KL-divergence step as in the SICK trainer.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
PAD = 0


class Tree:
    def __init__(self, idx, children=()):
        self.idx, self.children, self.state = idx, list(children), None

    @property
    def num_children(self):
        return len(self.children)


class ChildSumTreeLSTM(nn.Module):
    def __init__(self, in_dim, mem_dim):
        super().__init__()
        self.mem_dim = mem_dim
        self.ioux = nn.Linear(in_dim, 3 * mem_dim)
        self.iouh = nn.Linear(mem_dim, 3 * mem_dim)
        self.fx = nn.Linear(in_dim, mem_dim)
        self.fh = nn.Linear(mem_dim, mem_dim)

    def node_forward(self, inputs, child_c, child_h):
        child_h_sum = torch.sum(child_h, dim=0, keepdim=True)
        iou = self.ioux(inputs) + self.iouh(child_h_sum)
        i, o, u = torch.split(iou, iou.size(1) // 3, dim=1)
        i, o, u = torch.sigmoid(i), torch.sigmoid(o), torch.tanh(u)
        f = torch.sigmoid(self.fh(child_h) + self.fx(inputs).repeat(len(child_h), 1))
        c = i * u + torch.sum(f * child_c, dim=0, keepdim=True)
        return c, o * torch.tanh(c)

    def forward(self, tree, inputs):
        for child in tree.children:
            self.forward(child, inputs)
        if tree.num_children == 0:
            child_c = inputs[0].new_zeros(1, self.mem_dim)
            child_h = inputs[0].new_zeros(1, self.mem_dim)
        else:
            child_c, child_h = zip(*[child.state for child in tree.children])
            child_c, child_h = torch.cat(child_c, dim=0), torch.cat(child_h, dim=0)
        tree.state = self.node_forward(inputs[tree.idx].unsqueeze(0), child_c, child_h)
        return tree.state


class Similarity(nn.Module):
    def __init__(self, mem_dim, hidden_dim, num_classes):
        super().__init__()
        self.wh = nn.Linear(2 * mem_dim, hidden_dim)
        self.wp = nn.Linear(hidden_dim, num_classes)

    def forward(self, lvec, rvec):
        vec_dist = torch.cat((lvec * rvec, torch.abs(lvec - rvec)), 1)
        return F.log_softmax(self.wp(torch.sigmoid(self.wh(vec_dist))), dim=1)


class SimilarityTreeLSTM(nn.Module):
    def __init__(self, vocab_size, in_dim, mem_dim, hidden_dim, num_classes, freeze, init_emb):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, in_dim, padding_idx=PAD)
        if freeze:
            self.emb.weight.requires_grad = False
        self.emb.weight.copy_(init_emb)
        self.childsumtreelstm = ChildSumTreeLSTM(in_dim, mem_dim)
        self.similarity = Similarity(mem_dim, hidden_dim, num_classes)

    def forward(self, ltree, linputs, rtree, rinputs):
        lstate, _ = self.childsumtreelstm(ltree, self.emb(linputs))
        rstate, _ = self.childsumtreelstm(rtree, self.emb(rinputs))
        return self.similarity(lstate, rstate)


def main(freeze_embed=False):
    vocab_size, in_dim, num_classes = 20, 8, 5
    emb = torch.zeros(vocab_size, in_dim).normal_(0, 0.05)
    emb[PAD].zero_()
    model = SimilarityTreeLSTM(vocab_size, in_dim, 6, 10, num_classes, freeze_embed, emb)
    optimizer = torch.optim.Adagrad(filter(lambda p: p.requires_grad, model.parameters()), lr=0.01)
    ltree = Tree(2, [Tree(0), Tree(1, [Tree(3)])])
    rtree = Tree(1, [Tree(0), Tree(2)])
    linputs, rinputs = torch.tensor([4, 7, 9, 3]), torch.tensor([5, 7, 11])
    target = F.softmax(torch.randn(1, num_classes), dim=1)
    loss = F.kl_div(model(ltree, linputs, rtree, rinputs), target, reduction="batchmean")
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


if __name__ == "__main__":
    main()
