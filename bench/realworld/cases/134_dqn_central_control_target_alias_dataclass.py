# Thread: https://github.com/andri27-ts/Reinforcement-Learning/issues/14
# Title: "Updating target network - Potential Bug"
# Diagnosis from the thread: in the course's DQN agent (Week3/central_control.py), update_target() first loads
# the moving network's weights into the target network and then rebinds `self.target_nn = self.moving_nn`.
# From the first sync on, the "target" is the moving network itself: every optimizer step rewrites the weights
# the Bellman targets are read from, so the target tracks the moving network and the fixed-target mechanism is
# silently gone. The fix is to keep only the load_state_dict copy.
# Kept: the agent's fields (target_nn, moving_nn, gamma, n_multi_step, double_DQN), set_optimizer (Adam on the
# moving net), optimize() (zero_grad, loss, backward, step), update_target(), the loss with the optional double
# DQN branch and the detached next-state values, MSE to the n-step Bellman target. Added: the agent written as a
# @dataclass holder, a small MLP Q-network, random mini-batches, and the gradient comparison (second update after
# a sync) with the agent whose update_target only copies the weights.
import copy
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn

torch.manual_seed(0)


class DQN(nn.Module):
    def __init__(self, obs_dim, n_actions):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, 32), nn.ReLU(), nn.Linear(32, n_actions))

    def forward(self, x):
        return self.net(x)


@dataclass
class CentralControl:
    target_nn: nn.Module
    moving_nn: nn.Module
    gamma: float = 0.99
    n_multi_step: int = 2
    double_DQN: bool = True
    optimizer: Optional[torch.optim.Optimizer] = None

    def set_optimizer(self, learning_rate):
        self.optimizer = torch.optim.Adam(self.moving_nn.parameters(), lr=learning_rate)

    def optimize(self, mini_batch):
        self.optimizer.zero_grad()
        loss = self._calculate_loss(mini_batch)
        loss.backward()
        grads = [p.grad.clone() for p in self.moving_nn.parameters()]
        self.optimizer.step()
        return grads

    def update_target(self):
        self.target_nn.load_state_dict(self.moving_nn.state_dict())
        self.target_nn = self.moving_nn

    def _calculate_loss(self, mini_batch):
        states_t, actions_t, next_states_t, rewards_t, done_t = mini_batch
        state_action_values = self.moving_nn(states_t).gather(1, actions_t[:, None]).squeeze(-1)
        if self.double_DQN:
            double_max_action = self.moving_nn(next_states_t).max(1)[1].detach()
            target_output = self.target_nn(next_states_t)
            next_state_values = torch.gather(target_output, 1, double_max_action[:, None]).squeeze(-1)
        else:
            next_state_values = self.target_nn(next_states_t).max(1)[0]
        next_state_values = next_state_values.detach()
        expected_state_action_values = rewards_t + (self.gamma ** self.n_multi_step) * next_state_values
        return nn.MSELoss()(state_action_values, expected_state_action_values)


class CentralControlFixed(CentralControl):
    def update_target(self):
        self.target_nn.load_state_dict(self.moving_nn.state_dict())


def run(agent_cls, moving, batches):
    agent = agent_cls(target_nn=DQN(4, 2), moving_nn=copy.deepcopy(moving))
    agent.set_optimizer(1e-2)
    agent.update_target()
    agent.optimize(batches[0])
    return agent.optimize(batches[1])


if __name__ == "__main__":
    moving = DQN(4, 2)
    batches = [(torch.randn(16, 4), torch.randint(0, 2, (16,)), torch.randn(16, 4), torch.randn(16),
                torch.zeros(16, dtype=torch.uint8)) for _ in range(2)]
    g_bug = run(CentralControl, moving, batches)
    g_fix = run(CentralControlFixed, moving, batches)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
