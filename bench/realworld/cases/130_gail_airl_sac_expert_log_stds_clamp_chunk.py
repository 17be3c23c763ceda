# Thread: https://github.com/toshikwa/gail-airl-ppo.pytorch/issues/13
# Title: "Questions about in-place operations"
# Diagnosis from the thread: running train_expert.py (the SAC expert that later supplies demonstrations for
# GAIL/AIRL) fails with "Output 1 of SplitBackward0 is a view and is being modified inplace". The reporter traced
# it to network/policy.py L49: StateDependentPolicy.sample() takes `means, log_stds = self.net(states).chunk(2,
# dim=-1)` and then calls `log_stds.clamp_(-20, 2)`; chunk returns multiple views, which may not be modified in
# place. Changing clamp_ to clamp makes it run.
# Kept: build_mlp, StateDependentPolicy (forward = tanh(means), sample = chunk + clamp_ + reparameterize with
# the tanh log-prob correction), the SAC actor update through twin critics with a fixed alpha. Added: sizes,
# a random batch, one actor update as the driver.
import math

import torch
import torch.nn as nn

torch.manual_seed(0)


def build_mlp(input_dim, output_dim, hidden_units=(64, 64), hidden_activation=nn.ReLU()):
    layers, units = [], input_dim
    for next_units in hidden_units:
        layers += [nn.Linear(units, next_units), hidden_activation]
        units = next_units
    layers.append(nn.Linear(units, output_dim))
    return nn.Sequential(*layers)


def calculate_log_pi(log_stds, noises, actions):
    gaussian_log_probs = (-0.5 * noises.pow(2) - log_stds).sum(dim=-1, keepdim=True) \
        - 0.5 * math.log(2 * math.pi) * log_stds.size(-1)
    return gaussian_log_probs - torch.log(1 - actions.pow(2) + 1e-6).sum(dim=-1, keepdim=True)


def reparameterize(means, log_stds):
    noises = torch.randn_like(means)
    us = means + noises * log_stds.exp()
    actions = torch.tanh(us)
    return actions, calculate_log_pi(log_stds, noises, actions)


class StateDependentPolicy(nn.Module):
    def __init__(self, state_shape, action_shape, hidden_units=(64, 64)):
        super().__init__()
        self.net = build_mlp(state_shape[0], 2 * action_shape[0], hidden_units)

    def forward(self, states):
        return torch.tanh(self.net(states).chunk(2, dim=-1)[0])

    def sample(self, states):
        means, log_stds = self.net(states).chunk(2, dim=-1)
        return reparameterize(means, log_stds.clamp_(-20, 2))


class TwinnedStateActionFunction(nn.Module):
    def __init__(self, state_shape, action_shape, hidden_units=(64, 64)):
        super().__init__()
        self.net1 = build_mlp(state_shape[0] + action_shape[0], 1, hidden_units)
        self.net2 = build_mlp(state_shape[0] + action_shape[0], 1, hidden_units)

    def forward(self, states, actions):
        xs = torch.cat([states, actions], dim=-1)
        return self.net1(xs), self.net2(xs)


class SAC:
    def __init__(self, state_shape, action_shape, alpha=0.2, lr_actor=3e-4):
        self.actor = StateDependentPolicy(state_shape, action_shape)
        self.critic = TwinnedStateActionFunction(state_shape, action_shape)
        self.optim_actor = torch.optim.Adam(self.actor.parameters(), lr=lr_actor)
        self.alpha = alpha

    def update_actor(self, states):
        actions, log_pis = self.actor.sample(states)
        qs1, qs2 = self.critic(states, actions)
        loss_actor = self.alpha * log_pis.mean() - torch.min(qs1, qs2).mean()
        self.optim_actor.zero_grad()
        loss_actor.backward(retain_graph=False)
        self.optim_actor.step()


if __name__ == "__main__":
    algo = SAC(state_shape=(8,), action_shape=(2,))
    algo.update_actor(torch.randn(32, 8))
