# Thread: https://github.com/microsoft/oac-explore/issues/27
# Title: "`RuntimeError: one of the variables needed for gradient computation has been modified by an inplace
#         operation`"
# Diagnosis from the thread: in the OAC (optimistic actor-critic) SAC trainer, train_from_torch() builds the
# policy loss from min(qf1, qf2) of the policy's new actions near the top (trainer.py L120-124), then computes
# the QF losses and runs the "Update networks" block: qf1 step, qf2 step, then policy_loss.backward(). With
# recent torch the QF optimizer steps have rewritten the Q weights the policy loss saved, so the policy backward
# fails. The reporter's fix: move the q_new_actions / policy_loss lines between the Q-network steps and the
# policy step (and warns that old torch silently used the stale graph).
# Kept: the rlkit-style trainer (policy returning tanh-squashed actions and log-probs, qf1/qf2 with target
# copies, automatic entropy tuning through log_alpha, the reward-scale / discount target), the order of the
# losses and the update block with retain_graph=True. Added: tiny MLPs, a random batch, one train call.
import torch
import torch.nn as nn
from torch.distributions import Normal

torch.manual_seed(0)


def mlp(n_in, n_out, hidden=32):
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, n_out))


class QF(nn.Module):
    def __init__(self, obs_dim, act_dim):
        super().__init__()
        self.net = mlp(obs_dim + act_dim, 1)

    def forward(self, obs, act):
        return self.net(torch.cat([obs, act], dim=1))


class TanhGaussianPolicy(nn.Module):
    def __init__(self, obs_dim, act_dim):
        super().__init__()
        self.net = mlp(obs_dim, 2 * act_dim)

    def forward(self, obs, reparameterize=True, return_log_prob=True):
        mean, log_std = self.net(obs).chunk(2, dim=1)
        std = log_std.clamp(-20, 2).exp()
        dist = Normal(mean, std)
        pre_tanh = dist.rsample()
        action = torch.tanh(pre_tanh)
        log_prob = (dist.log_prob(pre_tanh) - torch.log(1 - action.pow(2) + 1e-6)).sum(dim=1, keepdim=True)
        return action, mean, log_std, log_prob


class SACTrainer:
    def __init__(self, policy, qf1, qf2, target_qf1, target_qf2, discount=0.99, reward_scale=1.0, lr=3e-4):
        self.policy, self.qf1, self.qf2 = policy, qf1, qf2
        self.target_qf1, self.target_qf2 = target_qf1, target_qf2
        self.discount, self.reward_scale = discount, reward_scale
        self.target_entropy = -1.0
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=lr)
        self.policy_optimizer = torch.optim.Adam(policy.parameters(), lr=lr)
        self.qf1_optimizer = torch.optim.Adam(qf1.parameters(), lr=lr)
        self.qf2_optimizer = torch.optim.Adam(qf2.parameters(), lr=lr)

    def train_from_torch(self, batch):
        rewards, terminals = batch["rewards"], batch["terminals"]
        obs, actions, next_obs = batch["observations"], batch["actions"], batch["next_observations"]

        """
        Policy and Alpha Loss
        """
        new_obs_actions, policy_mean, policy_log_std, log_pi = self.policy(obs)
        alpha_loss = -(self.log_alpha * (log_pi + self.target_entropy).detach()).mean()
        self.alpha_optimizer.zero_grad()
        alpha_loss.backward()
        self.alpha_optimizer.step()
        alpha = self.log_alpha.exp()

        q_new_actions = torch.min(self.qf1(obs, new_obs_actions), self.qf2(obs, new_obs_actions))
        policy_loss = (alpha * log_pi - q_new_actions).mean()

        """
        QF Loss
        """
        q1_pred = self.qf1(obs, actions)
        q2_pred = self.qf2(obs, actions)
        new_next_actions, _, _, new_log_pi = self.policy(next_obs)
        target_q_values = torch.min(self.target_qf1(next_obs, new_next_actions),
                                    self.target_qf2(next_obs, new_next_actions)) - alpha * new_log_pi
        q_target = self.reward_scale * rewards + (1.0 - terminals) * self.discount * target_q_values
        qf1_loss = ((q1_pred - q_target.detach()) ** 2).mean()
        qf2_loss = ((q2_pred - q_target.detach()) ** 2).mean()

        """
        Update networks
        """
        self.qf1_optimizer.zero_grad()
        qf1_loss.backward(retain_graph=True)
        self.qf1_optimizer.step()

        self.qf2_optimizer.zero_grad()
        qf2_loss.backward(retain_graph=True)
        self.qf2_optimizer.step()

        self.policy_optimizer.zero_grad()
        policy_loss.backward(retain_graph=True)
        self.policy_optimizer.step()


if __name__ == "__main__":
    obs_dim, act_dim, n = 6, 2, 16
    qf1, qf2 = QF(obs_dim, act_dim), QF(obs_dim, act_dim)
    target_qf1, target_qf2 = QF(obs_dim, act_dim), QF(obs_dim, act_dim)
    target_qf1.load_state_dict(qf1.state_dict())
    target_qf2.load_state_dict(qf2.state_dict())
    trainer = SACTrainer(TanhGaussianPolicy(obs_dim, act_dim), qf1, qf2, target_qf1, target_qf2)
    batch = {"observations": torch.randn(n, obs_dim), "actions": torch.rand(n, act_dim) * 2 - 1,
             "next_observations": torch.randn(n, obs_dim), "rewards": torch.randn(n, 1),
             "terminals": torch.zeros(n, 1)}
    trainer.train_from_torch(batch)
