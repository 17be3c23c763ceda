# Source: https://github.com/adambielski/siamese-triplet/issues/51
# Title: "Whether embedding is normalized ||x||=1 ?"
# Diagnosis from the thread: EmbeddingNetL2 L2-normalises the embedding in place,
# `output /= output.pow(2).sum(1, keepdim=True).sqrt()`; pow saved the un-normalised output for backward, so
# switching the triplet experiments to EmbeddingNetL2 fails with "... output 0 of AddmmBackward, is at version
# 1". The reporter's fix (and the usual one) is the out-of-place division. Kept from the thread: EmbeddingNet
# (conv trunk + fc ending in a Linear) and its EmbeddingNetL2 subclass with the in-place normalisation, the
# TripletNet wrapper and the triplet loss with a margin. Added: 16x16 random "images", sizes, one step.
import torch
import torch.nn as nn
import torch.nn.functional as F


class EmbeddingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.convnet = nn.Sequential(nn.Conv2d(1, 8, 5), nn.PReLU(), nn.MaxPool2d(2, stride=2),
                                     nn.Conv2d(8, 16, 3), nn.PReLU(), nn.MaxPool2d(2, stride=2))
        self.fc = nn.Sequential(nn.Linear(16 * 2 * 2, 32), nn.PReLU(), nn.Linear(32, 8))

    def forward(self, x):
        output = self.convnet(x)
        output = output.view(output.size()[0], -1)
        return self.fc(output)

    def get_embedding(self, x):
        return self.forward(x)


class EmbeddingNetL2(EmbeddingNet):
    def forward(self, x):
        output = super().forward(x)
        output /= output.pow(2).sum(1, keepdim=True).sqrt()
        return output


class TripletNet(nn.Module):
    def __init__(self, embedding_net):
        super().__init__()
        self.embedding_net = embedding_net

    def forward(self, x1, x2, x3):
        return self.embedding_net(x1), self.embedding_net(x2), self.embedding_net(x3)


class TripletLoss(nn.Module):
    def __init__(self, margin):
        super().__init__()
        self.margin = margin

    def forward(self, anchor, positive, negative):
        distance_positive = (anchor - positive).pow(2).sum(1)
        distance_negative = (anchor - negative).pow(2).sum(1)
        return F.relu(distance_positive - distance_negative + self.margin).mean()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TripletNet(EmbeddingNetL2())
    loss_fn = TripletLoss(margin=0.2)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    anchor, pos, neg = (torch.randn(4, 1, 16, 16) for _ in range(3))
    optimizer.zero_grad()
    loss = loss_fn(*model(anchor, pos, neg))
    loss.backward()
    optimizer.step()
    print("ok")
