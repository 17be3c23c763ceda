# Thread: https://github.com/montrealrobotics/active-domainrand/issues/9
# Title: "RuntimeError in critic_loss.backward(retain_graph=True)"
# What the thread shows: Active Domain Randomization's SVPG.train() fails in critic_loss.backward(retain_graph=True)
# on torch 1.10 with "modified by an inplace operation". The thread has no maintainer diagnosis; the code it points
# to (common/svpg/svpg.py) explains it: step() writes every particle's critic value into one shared buffer
# (`self.values[i][t] = value`), and train() loops over particles, stepping particle i's optimiser before particle
# i+1's critic loss backpropagates through that same buffer, whose in-place writes chain back to particle i's critic
# (weights already updated). Keeping each particle's values in its own list and concatenating them removes it.
# Kept from the repository code: SVPGParticle (actor + critic heads, Categorical policy) with frozen prior particles,
# select_action() saving log-probs and KL to the prior, compute_returns() with the KL-augmented reward, step()
# filling self.values in place, train() with critic backward(retain_graph=True) + optimiser step, then the policy
# gradient backward per particle. Added: 2 particles, 3-step rollouts, random simulator rewards, no SVGD kernel step.
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.distributions import Categorical
from torch.distributions.kl import kl_divergence

torch.manual_seed(0)
np.random.seed(0)
LEARNING_RATE = 3e-4
HIDDEN_DIMENSIONS = 16


class SVPGParticle(nn.Module):
    def __init__(self, input_dim, output_dim, hidden_dim, freeze=False):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(input_dim, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, output_dim))
        self.critic = nn.Sequential(nn.Linear(input_dim, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, 1))
        if freeze:
            for p in self.parameters():
                p.requires_grad = False
        self.reset()

    def reset(self):
        self.saved_log_probs, self.saved_klds = [], []

    def forward(self, x):
        return Categorical(logits=self.actor(x)), self.critic(x)


class SVPG:
    def __init__(self, nagents, nparams, svpg_rollout_length, kld_coefficient=0.001):
        self.nagents, self.nparams = nagents, nparams
        self.svpg_rollout_length = svpg_rollout_length
        self.kld_coefficient, self.gamma = kld_coefficient, 0.99
        self.last_states = np.random.uniform(0, 1, (nagents, nparams))
        self.particles, self.prior_particles, self.optimizers = [], [], []
        for _ in range(nagents):
            policy = SVPGParticle(nparams, nparams * 2, HIDDEN_DIMENSIONS)
            self.particles.append(policy)
            self.prior_particles.append(SVPGParticle(nparams, nparams * 2, HIDDEN_DIMENSIONS, freeze=True))
            self.optimizers.append(optim.Adam(policy.parameters(), lr=LEARNING_RATE))

    def select_action(self, policy_idx, state):
        state = torch.from_numpy(state).float().unsqueeze(0)
        dist, value = self.particles[policy_idx](state)
        prior_dist, _ = self.prior_particles[policy_idx](state)
        action = dist.sample()
        self.particles[policy_idx].saved_log_probs.append(dist.log_prob(action))
        self.particles[policy_idx].saved_klds.append(kl_divergence(dist, prior_dist))
        return action.item(), value

    def compute_returns(self, next_value, rewards, masks, klds):
        R = next_value
        returns = []
        for step in reversed(range(len(rewards))):
            R = self.gamma * masks[step] * R + (rewards[step] - self.kld_coefficient * klds[step])
            returns.insert(0, R)
        return returns

    def step(self):
        self.values = torch.zeros((self.nagents, self.svpg_rollout_length, 1)).float()
        self.masks = np.ones((self.nagents, self.svpg_rollout_length))
        for i in range(self.nagents):
            self.particles[i].reset()
            current_sim_params = self.last_states[i]
            for t in range(self.svpg_rollout_length):
                action, value = self.select_action(i, current_sim_params)
                self.values[i][t] = value
                delta = np.array([-1.0 if action % 2 == 0 else 1.0] * self.nparams) * 0.05
                current_sim_params = np.clip(current_sim_params + delta, 0, 1)
            self.last_states[i] = current_sim_params

    def train(self, simulator_rewards):
        for i in range(self.nagents):
            policy_grad_particle = []
            _, next_value = self.select_action(i, self.last_states[i])
            particle_rewards = torch.from_numpy(simulator_rewards[i]).float()
            masks = torch.from_numpy(self.masks[i]).float()
            returns = self.compute_returns(next_value, particle_rewards, masks, self.particles[i].saved_klds)
            returns = torch.cat(returns).detach()
            advantages = returns - self.values[i]
            for log_prob, advantage in zip(self.particles[i].saved_log_probs, advantages):
                policy_grad_particle.append(log_prob * advantage.detach())

            self.optimizers[i].zero_grad()
            critic_loss = 0.5 * advantages.pow(2).mean()
            critic_loss.backward(retain_graph=True)
            self.optimizers[i].step()

            self.optimizers[i].zero_grad()
            policy_grad = -torch.cat(policy_grad_particle).mean()
            policy_grad.backward()
            self.optimizers[i].step()
            print(f"particle {i}: critic_loss {critic_loss.item():.4f}")


if __name__ == "__main__":
    svpg = SVPG(nagents=2, nparams=1, svpg_rollout_length=3)
    svpg.step()
    svpg.train(np.random.randn(2, 3))
