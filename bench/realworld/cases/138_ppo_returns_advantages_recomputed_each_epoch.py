# Thread: https://github.com/michaelnny/deep_rl_zoo/issues/5
# Title: "PPO returns and advantages should be fixed"
# Diagnosis from the thread: the maintainer's own report - in the original PPO algorithm the returns and the
# GAE advantages are computed once for the unrolled sequences and held fixed across the K update epochs, but
# this implementation computes them on the fly inside each update, from the value network that the previous
# epochs' optimizer steps have already changed. Every epoch after the first thus optimises against moving
# targets and advantages, silently. Fixed (closed) by precomputing them before the epochs.
# Kept: an actor-critic network with a categorical policy head and a value head, an unroll of transitions
# (states, actions, rewards, dones, behaviour log-probs), GAE with gamma/lambda and the bootstrap value, the
# clipped-surrogate policy loss, the value loss to the returns, an entropy bonus, K epochs of Adam updates with
# the returns/advantages recomputed inside each one. Added: small sizes, a random unroll, and the comparison of
# the second epoch's gradients with the version that computes the returns and advantages once.
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

torch.manual_seed(0)


class ActorCriticNet(nn.Module):
    def __init__(self, state_dim, num_actions, hidden=32):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(state_dim, hidden), nn.Tanh())
        self.policy_head = nn.Linear(hidden, num_actions)
        self.value_head = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.body(x)
        return self.policy_head(h), self.value_head(h).squeeze(-1)


def compute_returns_and_advantages(values, bootstrap_value, rewards, dones, gamma=0.99, gae_lambda=0.95):
    advantages = torch.zeros_like(rewards)
    gae = torch.zeros(())
    next_value = bootstrap_value
    for t in reversed(range(rewards.shape[0])):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * not_done - values[t]
        gae = delta + gamma * gae_lambda * not_done * gae
        advantages[t] = gae
        next_value = values[t]
    return advantages + values, advantages


class PPOLearner:
    def __init__(self, network, clip_epsilon=0.2, value_coef=0.5, entropy_coef=0.01, lr=3e-3,
                 fixed_targets=False):
        self.network = network
        self.optimizer = torch.optim.Adam(network.parameters(), lr=lr)
        self.clip_epsilon, self.value_coef, self.entropy_coef = clip_epsilon, value_coef, entropy_coef
        self.fixed_targets = fixed_targets

    def _targets(self, unroll):
        with torch.no_grad():
            _, values = self.network(unroll["states"])
            _, bootstrap_value = self.network(unroll["last_state"])
        return compute_returns_and_advantages(values, bootstrap_value[0], unroll["rewards"], unroll["dones"])

    def update(self, unroll, num_epochs=2):
        grads = []
        if self.fixed_targets:
            returns, advantages = self._targets(unroll)
        for _ in range(num_epochs):
            if not self.fixed_targets:
                returns, advantages = self._targets(unroll)
            logits, values = self.network(unroll["states"])
            dist = Categorical(logits=logits)
            ratio = torch.exp(dist.log_prob(unroll["actions"]) - unroll["behaviour_logprob"])
            clipped = torch.clamp(ratio, 1 - self.clip_epsilon, 1 + self.clip_epsilon)
            policy_loss = -torch.min(ratio * advantages, clipped * advantages).mean()
            value_loss = F.mse_loss(values, returns)
            loss = policy_loss + self.value_coef * value_loss - self.entropy_coef * dist.entropy().mean()
            self.optimizer.zero_grad()
            loss.backward()
            grads.append([p.grad.clone() for p in self.network.parameters()])
            self.optimizer.step()
        return grads[-1]


if __name__ == "__main__":
    T, state_dim, num_actions = 16, 6, 3
    net = ActorCriticNet(state_dim, num_actions)
    states = torch.randn(T, state_dim)
    with torch.no_grad():
        logits, _ = net(states)
        dist = Categorical(logits=logits)
        actions = dist.sample()
        behaviour_logprob = dist.log_prob(actions)
    unroll = {"states": states, "actions": actions, "behaviour_logprob": behaviour_logprob,
              "rewards": torch.randn(T), "dones": (torch.rand(T) < 0.1).float(),
              "last_state": torch.randn(1, state_dim)}
    g_bug = PPOLearner(copy.deepcopy(net)).update(unroll)
    g_fix = PPOLearner(copy.deepcopy(net), fixed_targets=True).update(unroll)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
