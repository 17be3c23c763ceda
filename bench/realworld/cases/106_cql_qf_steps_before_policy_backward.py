# Thread: https://github.com/aviralkumar2907/CQL/issues/5
# Title: "QF_Loss backprops policy network"
# Diagnosis from the thread: in the CQL trainer the policy loss (alpha * log_pi - min(Q1, Q2) of the policy's
# reparameterised actions) is formed first, then the Q losses (with the conservative logsumexp term over random and
# policy actions) are backpropagated and the Q optimisers step before the policy's backward; the policy backward
# then needs Q weights the Q steps already rewrote ("[256, 1], which is output 0 of TBackward, is at version 40001;
# expected version 40000"). Suggested fix: optimise the policy on policy_loss before the Q updates (or do not
# reparameterise the policy actions used inside the Q loss).
# Kept from the thread: the rlkit-style trainer (policy, qf1, qf2, target_qf1, target_qf2, three Adam optimisers),
# the order of the losses and of the updates, the CQL logsumexp penalty over random/current/next policy actions.
# Added: a small tanh-Gaussian policy, a random batch, sizes, one training step.
import torch
import torch.nn as nn
from torch.distributions import Normal

torch.manual_seed(0)


class FlattenMlp(nn.Module):
    def __init__(self, input_size, output_size, hidden=32):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(input_size, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.last_fc = nn.Linear(hidden, output_size)

    def forward(self, *inputs):
        return self.last_fc(self.fc(torch.cat(inputs, dim=-1)))


class TanhGaussianPolicy(nn.Module):
    def __init__(self, obs_dim, action_dim, hidden=32):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU())
        self.mean = nn.Linear(hidden, action_dim)
        self.log_std = nn.Linear(hidden, action_dim)

    def forward(self, obs, reparameterize=True):
        h = self.fc(obs)
        mean, log_std = self.mean(h), self.log_std(h).clamp(-20, 2)
        dist = Normal(mean, log_std.exp())
        pre_tanh = dist.rsample() if reparameterize else dist.sample()
        action = torch.tanh(pre_tanh)
        log_prob = (dist.log_prob(pre_tanh) - torch.log(1 - action.pow(2) + 1e-6)).sum(-1, keepdim=True)
        return action, log_prob


class CQLTrainer:
    def __init__(self, obs_dim=5, action_dim=2, discount=0.99, min_q_weight=5.0, num_random=4):
        self.policy = TanhGaussianPolicy(obs_dim, action_dim)
        self.qf1, self.qf2 = FlattenMlp(obs_dim + action_dim, 1), FlattenMlp(obs_dim + action_dim, 1)
        self.target_qf1, self.target_qf2 = FlattenMlp(obs_dim + action_dim, 1), FlattenMlp(obs_dim + action_dim, 1)
        self.target_qf1.load_state_dict(self.qf1.state_dict())
        self.target_qf2.load_state_dict(self.qf2.state_dict())
        self.policy_optimizer = torch.optim.Adam(self.policy.parameters(), lr=1e-4)
        self.qf1_optimizer = torch.optim.Adam(self.qf1.parameters(), lr=3e-4)
        self.qf2_optimizer = torch.optim.Adam(self.qf2.parameters(), lr=3e-4)
        self.discount, self.min_q_weight, self.num_random = discount, min_q_weight, num_random
        self.action_dim, self.alpha = action_dim, 0.2

    def _get_tensor_values(self, obs, actions, network):
        n = obs.shape[0]
        obs_rep = obs.unsqueeze(1).repeat(1, actions.shape[0] // n, 1).view(-1, obs.shape[1])
        return network(obs_rep, actions).view(n, -1, 1)

    def _get_policy_actions(self, obs, num_actions):
        obs_rep = obs.unsqueeze(1).repeat(1, num_actions, 1).view(-1, obs.shape[1])
        return self.policy(obs_rep)

    def train_from_torch(self, batch):
        obs, actions, rewards, next_obs, terminals = batch

        new_obs_actions, log_pi = self.policy(obs)
        q_new_actions = torch.min(self.qf1(obs, new_obs_actions), self.qf2(obs, new_obs_actions))
        policy_loss = (self.alpha * log_pi - q_new_actions).mean()

        q1_pred, q2_pred = self.qf1(obs, actions), self.qf2(obs, actions)
        with torch.no_grad():
            new_next_actions, new_log_pi = self.policy(next_obs)
            target_q = torch.min(self.target_qf1(next_obs, new_next_actions),
                                 self.target_qf2(next_obs, new_next_actions)) - self.alpha * new_log_pi
            q_target = rewards + (1.0 - terminals) * self.discount * target_q
        qf1_loss = ((q1_pred - q_target) ** 2).mean()
        qf2_loss = ((q2_pred - q_target) ** 2).mean()

        random_actions = torch.empty(obs.shape[0] * self.num_random, self.action_dim).uniform_(-1, 1)
        curr_actions, curr_log_pis = self._get_policy_actions(obs, self.num_random)
        next_actions, next_log_pis = self._get_policy_actions(next_obs, self.num_random)
        penalties = []
        for qf in (self.qf1, self.qf2):
            q_rand = self._get_tensor_values(obs, random_actions, qf)
            q_curr = self._get_tensor_values(obs, curr_actions, qf)
            q_next = self._get_tensor_values(obs, next_actions, qf)
            cat_q = torch.cat([q_rand, q_next, q_curr], 1)
            penalties.append(torch.logsumexp(cat_q, dim=1).mean() * self.min_q_weight)
        qf1_loss = qf1_loss + penalties[0] - self._get_tensor_values(obs, actions, self.qf1).mean() * self.min_q_weight
        qf2_loss = qf2_loss + penalties[1] - self._get_tensor_values(obs, actions, self.qf2).mean() * self.min_q_weight

        self.qf1_optimizer.zero_grad()
        qf1_loss.backward(retain_graph=True)
        self.qf1_optimizer.step()

        self.qf2_optimizer.zero_grad()
        qf2_loss.backward(retain_graph=True)
        self.qf2_optimizer.step()

        self.policy_optimizer.zero_grad()
        policy_loss.backward()
        self.policy_optimizer.step()
        return policy_loss.item(), qf1_loss.item(), qf2_loss.item()


if __name__ == "__main__":
    n = 8
    batch = (torch.randn(n, 5), torch.rand(n, 2) * 2 - 1, torch.randn(n, 1), torch.randn(n, 5), torch.zeros(n, 1))
    print(CQLTrainer().train_from_torch(batch))
