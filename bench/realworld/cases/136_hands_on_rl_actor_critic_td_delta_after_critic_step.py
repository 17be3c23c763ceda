# Thread: https://github.com/boyu-ai/Hands-on-RL/issues/92
# Title: "第10章 actor-critic算法的顺序问题" (chapter 10: the order of the actor-critic updates)
# Diagnosis from the thread: the book's ActorCritic.update() computes the TD target and the TD error
# td_delta = td_target - critic(states) first, builds both losses, and only then steps the two optimisers. A
# reader "tidied" it into a critic block (TD target, critic loss, backward, critic step) followed by an actor
# block that computes td_delta = td_target - critic(states) after the critic's optimizer step, and training got
# clearly worse with no error. The actor's advantage is then measured with the already-updated critic (while
# td_target still comes from the old one), so the policy gradient is not the one of the algorithm; the thread
# (closed) keeps the book's order, TD error first - the same answer the Morvan tutorial gives for this question.
# Kept: PolicyNet (softmax policy), ValueNet, update(transition_dict) with the TD target masked by dones, the
# actor loss -log pi(a|s) * td_delta.detach(), the MSE critic loss to the detached target, Adam for each net,
# and the reordered update as posted. Added: small sizes, a random transition batch, and the comparison of the
# actor gradients with the book's update on identical networks.
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class PolicyNet(nn.Module):
    def __init__(self, state_dim, hidden_dim, action_dim):
        super().__init__()
        self.fc1 = nn.Linear(state_dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, action_dim)

    def forward(self, x):
        return F.softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


class ValueNet(nn.Module):
    def __init__(self, state_dim, hidden_dim):
        super().__init__()
        self.fc1 = nn.Linear(state_dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, 1)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class ActorCritic:
    def __init__(self, actor, critic, actor_lr=1e-3, critic_lr=1e-2, gamma=0.98):
        self.actor, self.critic = actor, critic
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=actor_lr)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=critic_lr)
        self.gamma = gamma

    def update(self, transition_dict):
        states = torch.tensor(transition_dict["states"], dtype=torch.float)
        actions = torch.tensor(transition_dict["actions"]).view(-1, 1)
        rewards = torch.tensor(transition_dict["rewards"], dtype=torch.float).view(-1, 1)
        next_states = torch.tensor(transition_dict["next_states"], dtype=torch.float)
        dones = torch.tensor(transition_dict["dones"], dtype=torch.float).view(-1, 1)

        # update the critic
        td_target = rewards + self.gamma * self.critic(next_states) * (1 - dones)
        critic_loss = torch.mean(F.mse_loss(self.critic(states), td_target.detach()))
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()
        # update the actor
        td_delta = td_target - self.critic(states)
        log_probs = torch.log(self.actor(states).gather(1, actions))
        actor_loss = torch.mean(-log_probs * td_delta.detach())
        actor_loss.backward()
        grads = [p.grad.clone() for p in self.actor.parameters()]
        self.actor_optimizer.step()
        return grads


class ActorCriticBook(ActorCritic):
    def update(self, transition_dict):
        states = torch.tensor(transition_dict["states"], dtype=torch.float)
        actions = torch.tensor(transition_dict["actions"]).view(-1, 1)
        rewards = torch.tensor(transition_dict["rewards"], dtype=torch.float).view(-1, 1)
        next_states = torch.tensor(transition_dict["next_states"], dtype=torch.float)
        dones = torch.tensor(transition_dict["dones"], dtype=torch.float).view(-1, 1)

        td_target = rewards + self.gamma * self.critic(next_states) * (1 - dones)
        td_delta = td_target - self.critic(states)
        log_probs = torch.log(self.actor(states).gather(1, actions))
        actor_loss = torch.mean(-log_probs * td_delta.detach())
        critic_loss = torch.mean(F.mse_loss(self.critic(states), td_target.detach()))
        self.actor_optimizer.zero_grad()
        self.critic_optimizer.zero_grad()
        actor_loss.backward()
        critic_loss.backward()
        grads = [p.grad.clone() for p in self.actor.parameters()]
        self.actor_optimizer.step()
        self.critic_optimizer.step()
        return grads


if __name__ == "__main__":
    actor, critic = PolicyNet(4, 32, 2), ValueNet(4, 32)
    batch = {"states": torch.randn(16, 4).tolist(), "actions": torch.randint(0, 2, (16,)).tolist(),
             "rewards": torch.ones(16).tolist(), "next_states": torch.randn(16, 4).tolist(),
             "dones": [0.0] * 15 + [1.0]}
    g_bug = ActorCritic(copy.deepcopy(actor), copy.deepcopy(critic)).update(batch)
    g_fix = ActorCriticBook(copy.deepcopy(actor), copy.deepcopy(critic)).update(batch)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
