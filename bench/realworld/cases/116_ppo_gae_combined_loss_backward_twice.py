# Thread: https://github.com/reinforcement-learning-kr/pg_travel/issues/22
# Title: "PPO Model RuntimeError"
# What the thread shows: running the repository's PPO (mujoco/agent/ppo_gae.py) on current torch fails with
# "[torch.FloatTensor [64, 1]], which is output 0 of AsStridedBackward0, is at version 2; expected version 1". The
# thread has no maintainer answer; the error names the critic's last Linear weight: train_model() builds one
# combined loss (actor_loss + 0.5 * critic_loss), backpropagates it with retain_graph and steps the critic, then
# backpropagates the same loss again for the actor, and that second backward needs the critic weight the critic step
# rewrote. One backward followed by both optimiser steps removes it.
# Kept from the repository code the thread points to: get_gae() over the rollout, surrogate_loss() with the ratio of
# new to old log densities, clipped value loss, the minibatch loop over shuffled indices, the combined loss with two
# backward/step pairs. Added: small actor/critic MLPs, a random 32-step rollout, 1 epoch, HyperParams as a class.
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)


class HyperParams:
    gamma = 0.99
    lamda = 0.98
    batch_size = 16
    clip_param = 0.2


hp = HyperParams


class Actor(nn.Module):
    def __init__(self, num_inputs, num_outputs, hidden=64):
        super().__init__()
        self.fc1 = nn.Linear(num_inputs, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, num_outputs)

    def forward(self, x):
        x = torch.tanh(self.fc2(torch.tanh(self.fc1(x))))
        mu = self.fc3(x)
        logstd = torch.zeros_like(mu)
        return mu, torch.exp(logstd), logstd


class Critic(nn.Module):
    def __init__(self, num_inputs, hidden=64):
        super().__init__()
        self.fc1 = nn.Linear(num_inputs, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


def log_density(x, mu, std, logstd):
    var = std.pow(2)
    log_density = -(x - mu).pow(2) / (2 * var) - 0.5 * np.log(2 * np.pi) - logstd
    return log_density.sum(1, keepdim=True)


def get_gae(rewards, masks, values):
    rewards, masks = torch.Tensor(rewards), torch.Tensor(masks)
    returns, advants = torch.zeros_like(rewards), torch.zeros_like(rewards)
    running_returns = previous_value = running_advants = 0
    for t in reversed(range(0, len(rewards))):
        running_returns = rewards[t] + hp.gamma * running_returns * masks[t]
        running_tderror = rewards[t] + hp.gamma * previous_value * masks[t] - values.data[t]
        running_advants = running_tderror + hp.gamma * hp.lamda * running_advants * masks[t]
        returns[t] = running_returns
        previous_value = values.data[t]
        advants[t] = running_advants
    advants = (advants - advants.mean()) / advants.std()
    return returns, advants


def surrogate_loss(actor, advants, states, old_policy, actions, index):
    mu, std, logstd = actor(torch.Tensor(states))
    new_policy = log_density(actions, mu, std, logstd)
    ratio = torch.exp(new_policy - old_policy[index])
    return ratio * advants, ratio


def train_model(actor, critic, memory, actor_optim, critic_optim, epochs=1):
    states = np.vstack([m[0] for m in memory])
    actions = [m[1] for m in memory]
    rewards = [m[2] for m in memory]
    masks = [m[3] for m in memory]
    values = critic(torch.Tensor(states))

    returns, advants = get_gae(rewards, masks, values.squeeze(1))
    mu, std, logstd = actor(torch.Tensor(states))
    old_policy = log_density(torch.Tensor(np.array(actions)), mu, std, logstd)
    old_values = critic(torch.Tensor(states))
    criterion = torch.nn.MSELoss()
    n = len(states)
    arr = np.arange(n)

    for epoch in range(epochs):
        np.random.shuffle(arr)
        for i in range(n // hp.batch_size):
            batch_index = torch.LongTensor(arr[hp.batch_size * i: hp.batch_size * (i + 1)])
            inputs = torch.Tensor(states)[batch_index]
            returns_samples = returns.unsqueeze(1)[batch_index]
            advants_samples = advants.unsqueeze(1)[batch_index]
            actions_samples = torch.Tensor(np.array(actions))[batch_index]
            oldvalue_samples = old_values[batch_index].detach()

            loss, ratio = surrogate_loss(actor, advants_samples, inputs, old_policy.detach(), actions_samples,
                                         batch_index)
            values = critic(inputs)
            clipped_values = oldvalue_samples + torch.clamp(values - oldvalue_samples, -hp.clip_param, hp.clip_param)
            critic_loss = torch.max(criterion(clipped_values, returns_samples),
                                    criterion(values, returns_samples)).mean()
            clipped_loss = torch.clamp(ratio, 1.0 - hp.clip_param, 1.0 + hp.clip_param) * advants_samples
            actor_loss = -torch.min(loss, clipped_loss).mean()
            loss = actor_loss + 0.5 * critic_loss

            critic_optim.zero_grad()
            loss.backward(retain_graph=True)
            critic_optim.step()

            actor_optim.zero_grad()
            loss.backward()
            actor_optim.step()


if __name__ == "__main__":
    actor, critic = Actor(5, 2), Critic(5)
    actor_optim = torch.optim.Adam(actor.parameters(), lr=3e-4)
    critic_optim = torch.optim.Adam(critic.parameters(), lr=3e-4, weight_decay=1e-3)
    memory = [(np.random.randn(1, 5), np.random.randn(2), float(np.random.rand()), float(t % 10 != 9))
              for t in range(32)]
    train_model(actor, critic, memory, actor_optim, critic_optim)
