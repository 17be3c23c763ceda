# Thread: https://github.com/sgadgil6/cnslab_fmri/issues/4
# Title: "Trying to backward through the graph a second time, but the saved intermediate results have already
#         been freed. Specify retain_graph=True when calling backward the first time."
# Diagnosis from the thread: fMRI_LSTM keeps its LSTM state on the module (self.hidden = self.init_hidden() in
# __init__) and its forward runs `lstm_out, self.hidden = self.lstm(x, self.hidden)`, so every mini-batch starts
# from the previous batch's (h, c), still attached to the previous batch's graph, which the previous backward
# already freed: the second loss.backward() raises, and retain_graph=True only runs out of memory. The fix the
# reporter posted (the author asked for it as a pull request): do not feed the stored state back,
# `lstm_out, self.hidden = self.lstm(x)` ("you don't need to pass hidden layer state").
# Kept: the module (LSTM -> last time step -> dropout -> linear -> sigmoid, BCELoss), init_hidden drawing a random
# (h, c), the script's loop that samples a random window W of the 22 ROI time series per subject, squeezes the
# batch and steps Adam. Added: random "fMRI" arrays instead of the .npy files, smaller sizes, three batches.
import random

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

torch.manual_seed(0)
np.random.seed(0)
random.seed(0)

W = 20
batch_size = 8


class fMRI_LSTM(nn.Module):
    def __init__(self, hidden_dim, input_dim, target_size, batch_size):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.batch_size = batch_size
        self.lstm = nn.LSTM(input_dim, hidden_dim, num_layers=1, batch_first=True)
        self.linear = nn.Linear(hidden_dim, target_size)
        self.hidden = self.init_hidden()
        self.dropout = nn.Dropout(p=0.2)
        self.activate = nn.Sigmoid()

    def init_hidden(self):
        return (torch.randn(1, self.batch_size, self.hidden_dim), torch.randn(1, self.batch_size, self.hidden_dim))

    def forward(self, x):
        lstm_out, self.hidden = self.lstm(x, self.hidden)
        lstm_out = lstm_out.squeeze()[:, -1, :]
        out = self.dropout(lstm_out)
        return self.activate(self.linear(out))


if __name__ == "__main__":
    train_data = np.random.randn(30, 1, 60, 22, 1)
    train_label = np.random.randint(0, 2, (30,)).astype(np.float64)
    net = fMRI_LSTM(16, 22, 1, batch_size=batch_size)
    criterion = nn.BCELoss()
    optimizer = optim.Adam(net.parameters(), lr=0.001, weight_decay=0.001)
    for epoch in range(3):
        net.train()
        idx_batch = np.random.permutation(train_data.shape[0])[:batch_size]
        train_data_batch = np.zeros((batch_size, 1, W, 22, 1))
        train_label_batch = train_label[idx_batch]
        for i in range(batch_size):
            r1 = random.randint(0, train_data.shape[2] - W)
            train_data_batch[i] = train_data[idx_batch[i], :, r1:r1 + W, :, :]
        x = torch.from_numpy(train_data_batch).float().squeeze()
        y = torch.from_numpy(train_label_batch).float().unsqueeze(1)
        optimizer.zero_grad()
        loss = criterion(net(x), y)
        loss.backward()
        optimizer.step()
