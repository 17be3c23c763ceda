# Thread: https://github.com/Quantum-Cheese/DeepReinforcementLearning_Pytorch/issues/1
# Title: "Lose of gradient in log_probs"
# Diagnosis from the thread: an A3C worker keeps (state, log_prob, reward) tuples in its memory and, when the
# episode ends, rebuilds the log-probabilities with `torch.tensor([t[1] for t in self.memory])`; that copy has
# no grad_fn, so the actor loss only trains through its entropy term and the policy-gradient part is lost.
# Kept from the thread: the Worker with local and global value/policy networks, the memory of tuples, the
# discounted future rewards, value loss then policy loss (advantage detached, Gaussian entropy bonus), the
# local-to-global gradient hand-off. Added: no multiprocessing or gym (one worker, a fixed fake episode), sizes,
# a driver that compares the global policy gradients with a fixed worker (torch.cat of the stored log-probs).
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal

torch.manual_seed(0)


class ValueNetwork(nn.Module):
    def __init__(self, state_size, out=1):
        super().__init__()
        self.fc1 = nn.Linear(state_size, 16)
        self.fc2 = nn.Linear(16, out)

    def forward(self, s):
        return self.fc2(F.relu(self.fc1(s)))


class ActorContinous(nn.Module):
    def __init__(self, state_size, action_size):
        super().__init__()
        self.fc = nn.Linear(state_size, 16)
        self.mu = nn.Linear(16, action_size)
        self.sigma = nn.Linear(16, action_size)

    def forward(self, s):
        h = F.relu(self.fc(s))
        return torch.tanh(self.mu(h)), F.softplus(self.sigma(h)) + 1e-3

    def act(self, s):
        mu, sigma = self.forward(s)
        dist = Normal(mu, sigma)
        action = dist.sample()
        return action, dist.log_prob(action).sum(-1, keepdim=True)


class Worker:
    def __init__(self, state_size, action_size, global_valueNet, global_value_optimizer,
                 global_policyNet, global_policy_optimizer, gamma=0.9):
        self.memory = []
        self.gamma = gamma
        self.global_valueNet, self.global_value_optimizer = global_valueNet, global_value_optimizer
        self.global_policyNet, self.global_policy_optimizer = global_policyNet, global_policy_optimizer
        self.local_policyNet = ActorContinous(state_size, action_size)
        self.local_valueNet = ValueNetwork(state_size, 1)
        self.sync_global()

    def sync_global(self):
        self.local_valueNet.load_state_dict(self.global_valueNet.state_dict())
        self.local_policyNet.load_state_dict(self.global_policyNet.state_dict())

    def stored_log_probs(self):
        return torch.tensor([t[1] for t in self.memory], dtype=torch.float).view(-1, 1)

    def calculate_loss(self):
        states = torch.cat([t[0] for t in self.memory])
        log_probs = self.stored_log_probs()

        rewards = [t[2] for t in self.memory]
        fur_rewards = []
        for i in range(len(rewards)):
            discount = [self.gamma ** k for k in range(len(rewards) - i)]
            fur_rewards.append(sum(d * f for d, f in zip(discount, rewards[i:])))
        fur_rewards = torch.tensor(fur_rewards, dtype=torch.float).view(-1, 1)

        V = self.local_valueNet(states)
        value_loss = F.mse_loss(fur_rewards, V)

        mu, sigma = self.local_policyNet(states)
        dist = Normal(mu, sigma)
        entropy = 0.5 + 0.5 * math.log(2 * math.pi) + torch.log(dist.scale)

        advantage = (fur_rewards - V).detach()
        policy_loss = -advantage * log_probs
        policy_loss = (policy_loss - 0.005 * entropy).mean()
        return value_loss, policy_loss

    def update_global(self):
        value_loss, policy_loss = self.calculate_loss()
        self.global_value_optimizer.zero_grad()
        value_loss.backward()
        for lp, gp in zip(self.local_valueNet.parameters(), self.global_valueNet.parameters()):
            gp._grad = lp.grad
        self.global_value_optimizer.step()

        self.global_policy_optimizer.zero_grad()
        policy_loss.backward()
        for lp, gp in zip(self.local_policyNet.parameters(), self.global_policyNet.parameters()):
            gp._grad = lp.grad
        grads = [torch.zeros_like(gp) if gp.grad is None else gp.grad.clone() for gp in self.global_policyNet.parameters()]
        self.global_policy_optimizer.step()
        self.memory = []
        return grads

    def run_episode(self, steps=5):
        gen = torch.Generator().manual_seed(3)
        for t in range(steps):
            state = torch.randn(1, 3, generator=gen)
            action, log_prob = self.local_policyNet.act(state)
            reward = -float(action.pow(2).sum())
            self.memory.append([state, log_prob, reward])
        return self.update_global()


class FixedWorker(Worker):
    def stored_log_probs(self):
        return torch.cat([t[1] for t in self.memory]).view(-1, 1)


def global_policy_grads(worker_cls):
    torch.manual_seed(0)
    g_value, g_policy = ValueNetwork(3, 1), ActorContinous(3, 2)
    worker = worker_cls(3, 2, g_value, torch.optim.Adam(g_value.parameters(), 1e-3),
                        g_policy, torch.optim.Adam(g_policy.parameters(), 1e-3))
    torch.manual_seed(1)
    return worker.run_episode()


if __name__ == "__main__":
    buggy = global_policy_grads(Worker)
    fixed = global_policy_grads(FixedWorker)
    if not all(torch.allclose(a, b) for a, b in zip(buggy, fixed)):
        print("gradguard-case: gradients differ from the fix")
