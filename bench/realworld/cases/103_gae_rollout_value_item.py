# Thread: https://github.com/jsboige/CoursIA/pull/15256
# Title: "fix(genai,#15035): PT-10 dead critic — value loss detached from the graph, critic never trained"
# Diagnosis from the thread: the rollout stored the critic's estimates with `values.append(value.item())`, so the
# value loss `mse_loss(values_t, returns)` was built from plain floats: it had no grad_fn, the value head got no
# gradient at all and its weights never moved, while the combined loss still backpropagated through the policy
# term without any error. Fix: keep the value tensors from the rollout and stack them.
# Kept from the thread: a policy/value network with a shared trunk and a Linear value head, a rollout that collects
# log-probs and values, GAE advantages computed backwards over the rollout, one combined loss. Added: a fake
# deterministic environment, sizes, a driver that compares the gradients with the fixed rollout.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Categorical

torch.manual_seed(0)


class PolicyValueNet(nn.Module):
    def __init__(self, obs_dim=6, n_actions=3, hidden=32):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh())
        self.policy_head = nn.Linear(hidden, n_actions)
        self.value_head = nn.Linear(hidden, 1)

    def forward(self, obs):
        h = self.trunk(obs)
        return self.policy_head(h), self.value_head(h).squeeze(-1)


def fake_env_step(obs, action, gen):
    reward = 1.0 if int(action) == int(obs.argmax()) % 3 else 0.0
    return torch.randn(6, generator=gen), reward


def rollout(net, n_steps=8):
    gen = torch.Generator().manual_seed(7)
    obs = torch.randn(6, generator=gen)
    log_probs, values, rewards = [], [], []
    for _ in range(n_steps):
        logits, value = net(obs)
        dist = Categorical(logits=logits)
        action = dist.sample()
        log_probs.append(dist.log_prob(action))
        values.append(value.item())
        obs, reward = fake_env_step(obs, action, gen)
        rewards.append(reward)
    with torch.no_grad():
        _, last_value = net(obs)
    return log_probs, values, rewards, float(last_value)


def rollout_fixed(net, n_steps=8):
    gen = torch.Generator().manual_seed(7)
    obs = torch.randn(6, generator=gen)
    log_probs, values, rewards = [], [], []
    for _ in range(n_steps):
        logits, value = net(obs)
        dist = Categorical(logits=logits)
        action = dist.sample()
        log_probs.append(dist.log_prob(action))
        values.append(value)
        obs, reward = fake_env_step(obs, action, gen)
        rewards.append(reward)
    with torch.no_grad():
        _, last_value = net(obs)
    return log_probs, values, rewards, float(last_value)


def gae(rewards, values, last_value, gamma=0.99, lam=0.95):
    vals = [float(v) for v in values] + [last_value]
    advantages, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * vals[t + 1] - vals[t]
        running = delta + gamma * lam * running
        advantages[t] = running
    adv = torch.tensor(advantages)
    returns = adv + torch.tensor(vals[:-1])
    return adv, returns


def train_gae(collect):
    torch.manual_seed(0)
    net = PolicyValueNet()
    torch.manual_seed(1)
    log_probs, values, rewards, last_value = collect(net)
    adv, returns = gae(rewards, values, last_value)
    values_t = torch.stack(values) if torch.is_tensor(values[0]) else torch.tensor(values)
    pg_loss = -(torch.stack(log_probs) * adv).mean()
    v_loss = F.mse_loss(values_t, returns)
    loss = pg_loss + 0.5 * v_loss
    net.zero_grad()
    loss.backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in net.parameters()]


if __name__ == "__main__":
    buggy = train_gae(rollout)
    fixed = train_gae(rollout_fixed)
    if not all(torch.allclose(a, b) for a, b in zip(buggy, fixed)):
        print("gradguard-case: gradients differ from the fix")
