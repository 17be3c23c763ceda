# Thread: https://github.com/ikostrikov/pytorch-a2c-ppo-acktr-gail/pull/96
# Title: "Termination gradient fix"
# Diagnosis from the thread: in an option-critic variant of the A2C code, the termination loss's gradient "was
# calculated correctly but was lost as one of the tensors was copied and did not stem from the actual termination
# layer": the termination probabilities used in the loss were the values copied into the rollout storage during
# acting (under no_grad), not the output of the termination head in the update, so the termination layer never
# learned while the rest of the loss trained normally.
# Kept from the thread's code base: RolloutStorage with preallocated tensors filled by insert() via copy_(), acting
# under torch.no_grad(), evaluate_actions() recomputing values and log-probs in update(), the A2C loss
# value_loss * coef + action_loss - entropy * coef, plus the option termination loss. Added: a small actor-critic with
# a termination head, random observations/rewards, 4 steps x 2 processes, and a driver comparing the gradients with
# the fixed update (termination probabilities from evaluate_actions()).
import torch
import torch.nn as nn
from torch.distributions import Categorical

torch.manual_seed(0)


class OptionActorCritic(nn.Module):
    def __init__(self, obs_dim=5, n_actions=3, hidden=16):
        super().__init__()
        self.base = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh())
        self.critic_linear = nn.Linear(hidden, 1)
        self.actor_linear = nn.Linear(hidden, n_actions)
        self.termination_linear = nn.Linear(hidden, 1)

    def forward(self, obs):
        h = self.base(obs)
        return self.critic_linear(h), Categorical(logits=self.actor_linear(h)), torch.sigmoid(self.termination_linear(h))

    def act(self, obs):
        value, dist, termination = self(obs)
        action = dist.sample()
        return value, action, dist.log_prob(action).unsqueeze(-1), termination

    def evaluate_actions(self, obs, actions):
        value, dist, termination = self(obs)
        return value, dist.log_prob(actions.squeeze(-1)).unsqueeze(-1), dist.entropy().mean(), termination


class RolloutStorage:
    def __init__(self, num_steps, num_processes, obs_dim):
        self.obs = torch.zeros(num_steps + 1, num_processes, obs_dim)
        self.rewards = torch.zeros(num_steps, num_processes, 1)
        self.value_preds = torch.zeros(num_steps + 1, num_processes, 1)
        self.returns = torch.zeros(num_steps + 1, num_processes, 1)
        self.actions = torch.zeros(num_steps, num_processes, 1, dtype=torch.long)
        self.terminations = torch.zeros(num_steps, num_processes, 1)
        self.num_steps, self.step = num_steps, 0

    def insert(self, obs, actions, value_preds, rewards, terminations):
        self.obs[self.step + 1].copy_(obs)
        self.actions[self.step].copy_(actions.unsqueeze(-1))
        self.value_preds[self.step].copy_(value_preds)
        self.rewards[self.step].copy_(rewards)
        self.terminations[self.step].copy_(terminations)
        self.step = (self.step + 1) % self.num_steps

    def compute_returns(self, next_value, gamma):
        self.returns[-1] = next_value
        for step in reversed(range(self.rewards.size(0))):
            self.returns[step] = self.returns[step + 1] * gamma + self.rewards[step]


class A2C_Options:
    def __init__(self, actor_critic, value_loss_coef=0.5, entropy_coef=0.01, termination_reg=0.01, lr=7e-4):
        self.actor_critic = actor_critic
        self.value_loss_coef, self.entropy_coef, self.termination_reg = value_loss_coef, entropy_coef, termination_reg
        self.optimizer = torch.optim.RMSprop(actor_critic.parameters(), lr, eps=1e-5, alpha=0.99)

    def termination_probs(self, rollouts, evaluated_terminations):
        return rollouts.terminations.view(-1, 1)

    def update(self, rollouts):
        num_steps, num_processes, _ = rollouts.rewards.size()
        values, action_log_probs, dist_entropy, terminations = self.actor_critic.evaluate_actions(
            rollouts.obs[:-1].view(-1, rollouts.obs.size(-1)), rollouts.actions.view(-1, 1))
        advantages = rollouts.returns[:-1].view(-1, 1) - values
        value_loss = advantages.pow(2).mean()
        action_loss = -(advantages.detach() * action_log_probs).mean()
        termination_loss = (self.termination_probs(rollouts, terminations)
                            * (advantages.detach() + self.termination_reg)).mean()
        self.optimizer.zero_grad()
        (value_loss * self.value_loss_coef + action_loss + termination_loss
         - dist_entropy * self.entropy_coef).backward()
        return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in self.actor_critic.parameters()]


class A2C_OptionsFixed(A2C_Options):
    def termination_probs(self, rollouts, evaluated_terminations):
        return evaluated_terminations


def update_grads(agent_cls, num_steps=4, num_processes=2, obs_dim=5):
    torch.manual_seed(0)
    actor_critic = OptionActorCritic(obs_dim)
    agent = agent_cls(actor_critic)
    rollouts = RolloutStorage(num_steps, num_processes, obs_dim)
    gen = torch.Generator().manual_seed(1)
    rollouts.obs[0].copy_(torch.randn(num_processes, obs_dim, generator=gen))
    for step in range(num_steps):
        with torch.no_grad():
            value, action, _, termination = actor_critic.act(rollouts.obs[step])
        obs, reward = torch.randn(num_processes, obs_dim, generator=gen), torch.randn(num_processes, 1, generator=gen)
        rollouts.insert(obs, action, value, reward, termination)
    with torch.no_grad():
        next_value = actor_critic(rollouts.obs[-1])[0]
    rollouts.compute_returns(next_value, gamma=0.99)
    return agent.update(rollouts)


if __name__ == "__main__":
    buggy = update_grads(A2C_Options)
    fixed = update_grads(A2C_OptionsFixed)
    if not all(torch.allclose(a, b) for a, b in zip(buggy, fixed)):
        print("gradguard-case: gradients differ from the fix")
