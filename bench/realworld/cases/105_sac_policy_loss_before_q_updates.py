# Thread: https://github.com/toshikwa/soft-actor-critic.pytorch/issues/1
# Title: "Which version of PyTorch should be used?"
# Diagnosis from the thread: with torch >= 1.5 the SAC agent's learn() fails with "modified by an inplace
# operation": it computes the policy loss (through Q1/Q2 of the policy's new actions) before stepping the Q1 and
# Q2 optimisers, so the Q steps rewrite weights the policy loss's graph saved. The reporter's fix: calculate
# policy_loss after updating Q1 and Q2.
# Kept from the thread: the agent layout (a twin-Q critic, a Gaussian policy, calc_critic_loss / calc_policy_loss
# / calc_entropy_loss, an update_params(optim, network, loss, grad_clip) helper, automatic entropy tuning with
# log_alpha), the order of the calls in learn(). Added: a random batch, sizes, a one-update driver.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal

torch.manual_seed(0)


def update_params(optim, network, loss, grad_clip=None, retain_graph=False):
    optim.zero_grad()
    loss.backward(retain_graph=retain_graph)
    if grad_clip is not None:
        for p in network.modules():
            torch.nn.utils.clip_grad_norm_(p.parameters(), grad_clip)
    optim.step()


class QNetwork(nn.Module):
    def __init__(self, num_inputs, num_actions, hidden=32):
        super().__init__()
        self.Q = nn.Sequential(nn.Linear(num_inputs + num_actions, hidden), nn.ReLU(),
                               nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.Q(x)


class TwinnedQNetwork(nn.Module):
    def __init__(self, num_inputs, num_actions):
        super().__init__()
        self.Q1 = QNetwork(num_inputs, num_actions)
        self.Q2 = QNetwork(num_inputs, num_actions)

    def forward(self, states, actions):
        x = torch.cat([states, actions], dim=1)
        return self.Q1(x), self.Q2(x)


class GaussianPolicy(nn.Module):
    def __init__(self, num_inputs, num_actions, hidden=32):
        super().__init__()
        self.policy = nn.Sequential(nn.Linear(num_inputs, hidden), nn.ReLU(), nn.Linear(hidden, 2 * num_actions))

    def sample(self, states):
        mean, log_std = torch.chunk(self.policy(states), 2, dim=-1)
        log_std = torch.clamp(log_std, -20, 2)
        normal = Normal(mean, log_std.exp())
        xs = normal.rsample()
        actions = torch.tanh(xs)
        log_probs = normal.log_prob(xs) - torch.log(1 - actions.pow(2) + 1e-6)
        return actions, log_probs.sum(dim=1, keepdim=True).neg()


class SacAgent:
    def __init__(self, obs_dim=6, act_dim=2, gamma=0.99, grad_clip=None):
        self.policy = GaussianPolicy(obs_dim, act_dim)
        self.critic = TwinnedQNetwork(obs_dim, act_dim)
        self.critic_target = TwinnedQNetwork(obs_dim, act_dim).eval()
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.policy_optim = torch.optim.Adam(self.policy.parameters(), lr=3e-4)
        self.q1_optim = torch.optim.Adam(self.critic.Q1.parameters(), lr=3e-4)
        self.q2_optim = torch.optim.Adam(self.critic.Q2.parameters(), lr=3e-4)
        self.target_entropy = -float(act_dim)
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.alpha = self.log_alpha.exp().detach()
        self.alpha_optim = torch.optim.Adam([self.log_alpha], lr=3e-4)
        self.gamma, self.grad_clip = gamma, grad_clip

    def calc_critic_loss(self, batch, weights):
        states, actions, rewards, next_states, dones = batch
        curr_q1, curr_q2 = self.critic(states, actions)
        with torch.no_grad():
            next_actions, next_entropies = self.policy.sample(next_states)
            next_q1, next_q2 = self.critic_target(next_states, next_actions)
            next_q = torch.min(next_q1, next_q2) + self.alpha * next_entropies
            target_q = rewards + (1.0 - dones) * self.gamma * next_q
        q1_loss = torch.mean((curr_q1 - target_q).pow(2) * weights)
        q2_loss = torch.mean((curr_q2 - target_q).pow(2) * weights)
        return q1_loss, q2_loss

    def calc_policy_loss(self, batch, weights):
        states = batch[0]
        sampled_action, entropy = self.policy.sample(states)
        q1, q2 = self.critic(states, sampled_action)
        q = torch.min(q1, q2)
        policy_loss = torch.mean((-q - self.alpha * entropy) * weights)
        return policy_loss, entropy

    def calc_entropy_loss(self, entropy, weights):
        return -torch.mean(self.log_alpha * (self.target_entropy - entropy).detach() * weights)

    def learn(self, batch, weights):
        q1_loss, q2_loss = self.calc_critic_loss(batch, weights)
        policy_loss, entropies = self.calc_policy_loss(batch, weights)

        update_params(self.q1_optim, self.critic.Q1, q1_loss, self.grad_clip)
        update_params(self.q2_optim, self.critic.Q2, q2_loss, self.grad_clip)
        update_params(self.policy_optim, self.policy, policy_loss, self.grad_clip)

        entropy_loss = self.calc_entropy_loss(entropies, weights)
        update_params(self.alpha_optim, None, entropy_loss)
        self.alpha = self.log_alpha.exp().detach()
        return q1_loss.item(), q2_loss.item(), policy_loss.item()


if __name__ == "__main__":
    agent = SacAgent()
    n = 16
    batch = (torch.randn(n, 6), torch.rand(n, 2) * 2 - 1, torch.randn(n, 1), torch.randn(n, 6), torch.zeros(n, 1))
    print(agent.learn(batch, torch.ones(n, 1)))
