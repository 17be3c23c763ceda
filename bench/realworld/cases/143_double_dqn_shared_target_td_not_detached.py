# Thread: https://github.com/datawhalechina/easy-rl/pull/117
# Title: "distinguish Qnet and set detach() on TD target"
# Diagnosis from the thread: in the tutorial's Double DQN agent the policy and target networks are the same
# module (both attributes are set from the one model passed to the agent, so the "hard copy" of the weights
# copies a network onto itself and target_net changes immediately whenever policy_net does), and the TD target
# reward + gamma * Q_target(s', argmax_a Q_policy(s', a)) is used without detach(). Together the regression
# target is a function of the trained weights, so loss.backward() also differentiates through the target: not
# the semi-gradient Double DQN prescribes, and with no error. The PR's fix: give the target network its own copy
# of the model, and detach the TD target.
# Kept: the MLP Q-network, a ReplayBuffer of (state, action, reward, next_state, done) tuples with sample(), the
# agent's __init__ taking the model and a cfg, the weight copy loop into target_net, update() with the
# policy-net argmax and the target-net evaluation (gather on the argmax), MSE loss, Adam, and the gradient
# clamp of the tutorial. Added: small sizes, a filled buffer, the comparison of the policy gradients with the
# fixed agent on identical weights and batch.
import copy
import random
from collections import deque
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

torch.manual_seed(0)
random.seed(0)


class MLP(nn.Module):
    def __init__(self, n_states, n_actions, hidden_dim=32):
        super().__init__()
        self.fc1 = nn.Linear(n_states, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, hidden_dim)
        self.fc3 = nn.Linear(hidden_dim, n_actions)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return self.fc3(x)


class ReplayBuffer:
    def __init__(self, capacity):
        self.buffer = deque(maxlen=capacity)

    def push(self, transition):
        self.buffer.append(transition)

    def sample(self, batch_size):
        batch = random.sample(self.buffer, batch_size)
        return zip(*batch)

    def __len__(self):
        return len(self.buffer)


class DoubleDQN:
    def __init__(self, model, memory, cfg):
        self.n_actions, self.gamma, self.batch_size = cfg.n_actions, cfg.gamma, cfg.batch_size
        self.device = torch.device(cfg.device)
        self.policy_net = model.to(self.device)
        self.target_net = model.to(self.device)
        for target_param, param in zip(self.target_net.parameters(), self.policy_net.parameters()):
            target_param.data.copy_(param.data)
        self.optimizer = optim.Adam(self.policy_net.parameters(), lr=cfg.lr)
        self.memory = memory

    def update(self):
        state_batch, action_batch, reward_batch, next_state_batch, done_batch = self.memory.sample(self.batch_size)
        state_batch = torch.tensor(np.array(state_batch), device=self.device, dtype=torch.float)
        action_batch = torch.tensor(action_batch, device=self.device).unsqueeze(1)
        reward_batch = torch.tensor(reward_batch, device=self.device, dtype=torch.float)
        next_state_batch = torch.tensor(np.array(next_state_batch), device=self.device, dtype=torch.float)
        done_batch = torch.tensor(np.float32(done_batch), device=self.device)

        q_value_batch = self.policy_net(state_batch).gather(dim=1, index=action_batch).squeeze(1)
        next_q_value_batch = self.policy_net(next_state_batch)
        next_target_value_batch = self.target_net(next_state_batch)
        next_target_q_value_batch = next_target_value_batch.gather(
            1, torch.max(next_q_value_batch, 1)[1].unsqueeze(1)).squeeze(1)
        expected_q_value_batch = reward_batch + self.gamma * next_target_q_value_batch * (1 - done_batch)
        loss = nn.MSELoss()(q_value_batch, expected_q_value_batch)
        self.optimizer.zero_grad()
        loss.backward()
        for param in self.policy_net.parameters():
            param.grad.data.clamp_(-1, 1)
        grads = [p.grad.clone() for p in self.policy_net.parameters()]
        self.optimizer.step()
        return grads


class DoubleDQNFixed(DoubleDQN):
    def __init__(self, model, memory, cfg):
        super().__init__(model, memory, cfg)
        self.target_net = copy.deepcopy(model).to(self.device)

    def update(self):
        state_batch, action_batch, reward_batch, next_state_batch, done_batch = self.memory.sample(self.batch_size)
        state_batch = torch.tensor(np.array(state_batch), device=self.device, dtype=torch.float)
        action_batch = torch.tensor(action_batch, device=self.device).unsqueeze(1)
        reward_batch = torch.tensor(reward_batch, device=self.device, dtype=torch.float)
        next_state_batch = torch.tensor(np.array(next_state_batch), device=self.device, dtype=torch.float)
        done_batch = torch.tensor(np.float32(done_batch), device=self.device)

        q_value_batch = self.policy_net(state_batch).gather(dim=1, index=action_batch).squeeze(1)
        next_q_value_batch = self.policy_net(next_state_batch)
        next_target_value_batch = self.target_net(next_state_batch)
        next_target_q_value_batch = next_target_value_batch.gather(
            1, torch.max(next_q_value_batch, 1)[1].unsqueeze(1)).squeeze(1)
        expected_q_value_batch = reward_batch + self.gamma * next_target_q_value_batch * (1 - done_batch)
        loss = nn.MSELoss()(q_value_batch, expected_q_value_batch.detach())
        self.optimizer.zero_grad()
        loss.backward()
        for param in self.policy_net.parameters():
            param.grad.data.clamp_(-1, 1)
        grads = [p.grad.clone() for p in self.policy_net.parameters()]
        self.optimizer.step()
        return grads


def filled_memory(cfg, n=64):
    rng = np.random.default_rng(0)
    memory = ReplayBuffer(1000)
    for _ in range(n):
        memory.push((rng.standard_normal(cfg.n_states).astype(np.float32), int(rng.integers(cfg.n_actions)),
                     float(rng.standard_normal()), rng.standard_normal(cfg.n_states).astype(np.float32),
                     bool(rng.random() < 0.1)))
    return memory


if __name__ == "__main__":
    cfg = SimpleNamespace(n_states=4, n_actions=2, gamma=0.95, batch_size=32, lr=1e-3, device="cpu")
    model = MLP(cfg.n_states, cfg.n_actions)
    random.seed(1)
    g_bug = DoubleDQN(copy.deepcopy(model), filled_memory(cfg), cfg).update()
    random.seed(1)
    g_fix = DoubleDQNFixed(copy.deepcopy(model), filled_memory(cfg), cfg).update()
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
