# Thread: https://github.com/PacktPublishing/Deep-Reinforcement-Learning-Hands-On-Second-Edition/issues/21
# Title: "Chapter 10"
# What the thread shows: after replacing two Linear layers of the stock-trading DQN with noisy linear layers, training
# fails with "[torch.cuda.FloatTensor [3, 512]] is at version 10005; expected version 10004": a [3, 512] tensor with no
# "output 0 of" part is a buffer, the output layer's noise epsilon_weight, and its version counts the normal_() calls.
# The thread has no maintainer answer; the book's own NoisyLinear multiplies sigma by `epsilon.data`, while a layer
# that multiplies sigma by the buffer itself saves the buffer for backward, and the next forward of the same network
# inside the loss (double DQN runs net on states and on next_states) resamples it in place with normal_().
# Kept from the thread: a NoisyLinear layer that resamples its epsilon buffers in forward, the Conv1D DQN for price
# windows with a dueling head whose last two Linear layers are noisy, the double-DQN loss calling net twice.
# Added: sizes, random price windows, one loss.backward().
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class NoisyLinear(nn.Linear):
    def __init__(self, in_features, out_features, sigma_init=0.017, bias=True):
        super().__init__(in_features, out_features, bias=bias)
        self.sigma_weight = nn.Parameter(torch.full((out_features, in_features), sigma_init))
        self.register_buffer("epsilon_weight", torch.zeros(out_features, in_features))
        if bias:
            self.sigma_bias = nn.Parameter(torch.full((out_features,), sigma_init))
            self.register_buffer("epsilon_bias", torch.zeros(out_features))
        self.reset_parameters()

    def reset_parameters(self):
        std = math.sqrt(3 / self.in_features)
        self.weight.data.uniform_(-std, std)
        self.bias.data.uniform_(-std, std)

    def forward(self, input):
        self.epsilon_weight.normal_()
        bias = self.bias
        if bias is not None:
            self.epsilon_bias.normal_()
            bias = bias + self.sigma_bias * self.epsilon_bias
        v = self.sigma_weight * self.epsilon_weight + self.weight
        return F.linear(input, v, bias)


class DQNConv1DLarge(nn.Module):
    def __init__(self, shape, actions_n, hidden=32):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(shape[0], 8, 3), nn.MaxPool1d(2), nn.ReLU(),
                                  nn.Conv1d(8, 8, 3), nn.ReLU())
        out_size = self._get_conv_out(shape)
        self.fc_val = nn.Sequential(nn.Linear(out_size, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.fc_adv = nn.Sequential(NoisyLinear(out_size, hidden), nn.ReLU(), NoisyLinear(hidden, actions_n))

    def _get_conv_out(self, shape):
        return int(torch.numel(self.conv(torch.zeros(1, *shape))))

    def forward(self, x):
        conv_out = self.conv(x).view(x.size()[0], -1)
        val, adv = self.fc_val(conv_out), self.fc_adv(conv_out)
        return val + adv - adv.mean(dim=1, keepdim=True)


def calc_loss(batch, net, tgt_net, gamma=0.99):
    states_v, actions_v, rewards_v, done_mask, next_states_v = batch
    state_action_values = net(states_v).gather(1, actions_v.unsqueeze(-1)).squeeze(-1)
    next_state_actions = net(next_states_v).max(1)[1]
    next_state_values = tgt_net(next_states_v).gather(1, next_state_actions.unsqueeze(-1)).squeeze(-1)
    next_state_values = next_state_values.masked_fill(done_mask, 0.0)
    expected_state_action_values = next_state_values.detach() * gamma + rewards_v
    return nn.MSELoss()(state_action_values, expected_state_action_values)


if __name__ == "__main__":
    shape, n = (3, 16), 8
    net, tgt_net = DQNConv1DLarge(shape, 3), DQNConv1DLarge(shape, 3)
    tgt_net.load_state_dict(net.state_dict())
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-4)
    batch = (torch.randn(n, *shape), torch.randint(0, 3, (n,)), torch.randn(n), torch.rand(n) < 0.1,
             torch.randn(n, *shape))
    optimizer.zero_grad()
    loss_v = calc_loss(batch, net, tgt_net)
    loss_v.backward()
    optimizer.step()
