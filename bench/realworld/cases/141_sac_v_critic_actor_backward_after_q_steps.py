# Thread: https://github.com/MrSyee/pg-is-all-you-need/issues/30
# Title: "SAC with torch 1.5.1 shows some error"
# Diagnosis from the thread: the SAC notebook's SACAgent.update_model() computes q_pred = min(qf_1(state,
# new_action), qf_2(state, new_action)) for the value target and the actor's advantage, then trains Q1, Q2 and V
# (backward + step each), and only then, every policy_update_freq steps, builds actor_loss from q_pred and calls
# actor_loss.backward(). The Q optimisers' steps have rewritten the Q weights q_pred's graph saved, so with torch
# >= 1.5 the actor backward fails with "modified by an inplace operation". The reporter (by e-mail, quoted by the
# maintainer) and the maintainer's fix (commit "move sac update code"): run the actor update before the Q and V
# optimizer steps.
# Kept: Actor (tanh-squashed Gaussian with the log-prob correction), CriticQ(state, action), CriticV(state),
# init_layer_uniform, the numpy ReplayBuffer, automatic entropy tuning with log_alpha trained first, the Q/V/actor
# losses and the update order as posted, the delayed policy update and the soft update of vf_target. Added: a
# tiny pendulum-like environment instead of gym, small sizes and step counts.
from typing import Dict, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Normal

torch.manual_seed(0)
np.random.seed(0)


class ReplayBuffer:
    def __init__(self, obs_dim: int, size: int, batch_size: int = 32):
        self.obs_buf = np.zeros([size, obs_dim], dtype=np.float32)
        self.next_obs_buf = np.zeros([size, obs_dim], dtype=np.float32)
        self.acts_buf = np.zeros([size], dtype=np.float32)
        self.rews_buf = np.zeros([size], dtype=np.float32)
        self.done_buf = np.zeros([size], dtype=np.float32)
        self.max_size, self.batch_size = size, batch_size
        self.ptr, self.size = 0, 0

    def store(self, obs, act, rew, next_obs, done):
        self.obs_buf[self.ptr] = obs
        self.next_obs_buf[self.ptr] = next_obs
        self.acts_buf[self.ptr] = act[0]
        self.rews_buf[self.ptr] = rew
        self.done_buf[self.ptr] = done
        self.ptr = (self.ptr + 1) % self.max_size
        self.size = min(self.size + 1, self.max_size)

    def sample_batch(self) -> Dict[str, np.ndarray]:
        idxs = np.random.choice(self.size, size=self.batch_size, replace=False)
        return dict(obs=self.obs_buf[idxs], next_obs=self.next_obs_buf[idxs], acts=self.acts_buf[idxs],
                    rews=self.rews_buf[idxs], done=self.done_buf[idxs])

    def __len__(self) -> int:
        return self.size


def init_layer_uniform(layer: nn.Linear, init_w: float = 3e-3) -> nn.Linear:
    layer.weight.data.uniform_(-init_w, init_w)
    layer.bias.data.uniform_(-init_w, init_w)
    return layer


class Actor(nn.Module):
    def __init__(self, in_dim: int, out_dim: int, log_std_min: float = -20, log_std_max: float = 2):
        super().__init__()
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        self.hidden1 = nn.Linear(in_dim, 32)
        self.hidden2 = nn.Linear(32, 32)
        self.log_std_layer = init_layer_uniform(nn.Linear(32, out_dim))
        self.mu_layer = init_layer_uniform(nn.Linear(32, out_dim))

    def forward(self, state: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.hidden2(F.relu(self.hidden1(state))))
        mu = self.mu_layer(x).tanh()
        log_std = self.log_std_layer(x).tanh()
        log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (log_std + 1)
        dist = Normal(mu, torch.exp(log_std))
        z = dist.rsample()
        action = z.tanh()
        log_prob = dist.log_prob(z) - torch.log(1 - action.pow(2) + 1e-7)
        return action, log_prob.sum(-1, keepdim=True)


class CriticQ(nn.Module):
    def __init__(self, in_dim: int):
        super().__init__()
        self.hidden1 = nn.Linear(in_dim, 32)
        self.hidden2 = nn.Linear(32, 32)
        self.out = init_layer_uniform(nn.Linear(32, 1))

    def forward(self, state: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        x = torch.cat((state, action), dim=-1)
        return self.out(F.relu(self.hidden2(F.relu(self.hidden1(x)))))


class CriticV(nn.Module):
    def __init__(self, in_dim: int):
        super().__init__()
        self.hidden1 = nn.Linear(in_dim, 32)
        self.hidden2 = nn.Linear(32, 32)
        self.out = init_layer_uniform(nn.Linear(32, 1))

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.out(F.relu(self.hidden2(F.relu(self.hidden1(state)))))


class ToyPendulum:
    obs_dim, action_dim = 3, 1

    def reset(self):
        self.t, self.state = 0, np.random.randn(3).astype(np.float32)
        return self.state

    def step(self, action):
        self.t += 1
        self.state = (0.9 * self.state + 0.1 * float(action[0])).astype(np.float32)
        return self.state, -float((self.state ** 2).sum()), self.t >= 20, {}

    def sample_action(self):
        return np.random.uniform(-1, 1, size=(1,)).astype(np.float32)


class SACAgent:
    def __init__(self, env, memory_size: int, batch_size: int, gamma: float = 0.99, tau: float = 5e-3,
                 initial_random_steps: int = 40, policy_update_freq: int = 2):
        obs_dim, action_dim = env.obs_dim, env.action_dim
        self.env = env
        self.memory = ReplayBuffer(obs_dim, memory_size, batch_size)
        self.batch_size, self.gamma, self.tau = batch_size, gamma, tau
        self.initial_random_steps, self.policy_update_freq = initial_random_steps, policy_update_freq
        self.device = torch.device("cpu")
        self.target_entropy = -np.prod((action_dim,)).item()
        self.log_alpha = torch.zeros(1, requires_grad=True, device=self.device)
        self.alpha_optimizer = optim.Adam([self.log_alpha], lr=3e-4)
        self.actor = Actor(obs_dim, action_dim).to(self.device)
        self.vf = CriticV(obs_dim).to(self.device)
        self.vf_target = CriticV(obs_dim).to(self.device)
        self.vf_target.load_state_dict(self.vf.state_dict())
        self.qf_1 = CriticQ(obs_dim + action_dim).to(self.device)
        self.qf_2 = CriticQ(obs_dim + action_dim).to(self.device)
        self.actor_optimizer = optim.Adam(self.actor.parameters(), lr=3e-4)
        self.vf_optimizer = optim.Adam(self.vf.parameters(), lr=3e-4)
        self.qf_1_optimizer = optim.Adam(self.qf_1.parameters(), lr=3e-4)
        self.qf_2_optimizer = optim.Adam(self.qf_2.parameters(), lr=3e-4)
        self.transition = list()
        self.total_step = 0

    def select_action(self, state: np.ndarray) -> np.ndarray:
        if self.total_step < self.initial_random_steps:
            selected_action = self.env.sample_action()
        else:
            selected_action = self.actor(torch.FloatTensor(state).to(self.device))[0].detach().cpu().numpy()
        self.transition = [state, selected_action]
        return selected_action

    def step(self, action: np.ndarray):
        next_state, reward, done, _ = self.env.step(action)
        self.transition += [reward, next_state, done]
        self.memory.store(*self.transition)
        return next_state, reward, done

    def update_model(self):
        device = self.device
        samples = self.memory.sample_batch()
        state = torch.FloatTensor(samples["obs"]).to(device)
        next_state = torch.FloatTensor(samples["next_obs"]).to(device)
        action = torch.FloatTensor(samples["acts"].reshape(-1, 1)).to(device)
        reward = torch.FloatTensor(samples["rews"].reshape(-1, 1)).to(device)
        done = torch.FloatTensor(samples["done"].reshape(-1, 1)).to(device)
        new_action, log_prob = self.actor(state)

        # train alpha (dual problem)
        alpha_loss = (-self.log_alpha.exp() * (log_prob + self.target_entropy).detach()).mean()
        self.alpha_optimizer.zero_grad()
        alpha_loss.backward()
        self.alpha_optimizer.step()
        alpha = self.log_alpha.exp()

        # q function loss
        mask = 1 - done
        q_1_pred = self.qf_1(state, action)
        q_2_pred = self.qf_2(state, action)
        v_target = self.vf_target(next_state)
        q_target = reward + self.gamma * v_target * mask
        qf_1_loss = F.mse_loss(q_1_pred, q_target.detach())
        qf_2_loss = F.mse_loss(q_2_pred, q_target.detach())

        # v function loss
        v_pred = self.vf(state)
        q_pred = torch.min(self.qf_1(state, new_action), self.qf_2(state, new_action))
        v_target = q_pred - alpha * log_prob
        vf_loss = F.mse_loss(v_pred, v_target.detach())

        # train Q functions
        self.qf_1_optimizer.zero_grad()
        qf_1_loss.backward()
        self.qf_1_optimizer.step()

        self.qf_2_optimizer.zero_grad()
        qf_2_loss.backward()
        self.qf_2_optimizer.step()
        qf_loss = qf_1_loss + qf_2_loss

        # train V function
        self.vf_optimizer.zero_grad()
        vf_loss.backward()
        self.vf_optimizer.step()

        if self.total_step % self.policy_update_freq == 0:
            advantage = q_pred - v_pred.detach()
            actor_loss = (alpha * log_prob - advantage).mean()
            self.actor_optimizer.zero_grad()
            actor_loss.backward()
            self.actor_optimizer.step()
            self._target_soft_update()
        else:
            actor_loss = torch.zeros(1)
        return actor_loss.data, qf_loss.data, vf_loss.data, alpha_loss.data

    def train(self, num_frames: int):
        state = self.env.reset()
        losses = []
        for self.total_step in range(1, num_frames + 1):
            action = self.select_action(state)
            next_state, reward, done = self.step(action)
            state = self.env.reset() if done else next_state
            if len(self.memory) >= self.batch_size and self.total_step > self.initial_random_steps:
                losses.append(self.update_model())
        return losses

    def _target_soft_update(self):
        for t_param, l_param in zip(self.vf_target.parameters(), self.vf.parameters()):
            t_param.data.copy_(self.tau * l_param.data + (1.0 - self.tau) * t_param.data)


if __name__ == "__main__":
    agent = SACAgent(ToyPendulum(), memory_size=200, batch_size=16)
    print(len(agent.train(60)))
