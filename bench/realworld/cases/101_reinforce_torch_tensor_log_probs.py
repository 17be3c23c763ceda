# Thread: https://github.com/kengz/SLM-Lab/pull/133
# Title: "Fix ActorCritic family"
# Diagnosis from the thread: REINFORCE and the algorithms built on it (AC, PPO, SIL) silently stopped learning:
# the stored per-step log-probabilities were turned into one tensor with `torch.tensor(...)`, which builds a brand
# new tensor cut from the graph, so the policy-gradient term carried no gradient; the fix is `torch.stack`.
# Kept from the thread: an agent that stores log-probs in its memory during the rollout and builds the policy loss
# from them at train time (plus an entropy bonus, so the total loss still backpropagates and nothing raises), the
# torch.tensor -> torch.stack fix. Added: a toy 4-state environment, sizes, a driver that compares gradients with
# the fixed agent.
import torch
import torch.nn as nn
from torch.distributions import Categorical

torch.manual_seed(0)


class MLPNet(nn.Module):
    def __init__(self, in_dim, out_dim, hid=16):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(in_dim, hid), nn.SELU(), nn.Linear(hid, out_dim))

    def forward(self, x):
        return self.model(x)


class Body:
    """Per-episode memory, as the agent's body keeps it."""

    def __init__(self):
        self.log_probs, self.entropies, self.rewards = [], [], []


class Reinforce:
    gamma = 0.99
    entropy_coef = 0.01

    def __init__(self, state_dim=4, action_dim=3):
        self.net = MLPNet(state_dim, action_dim)
        self.optim = torch.optim.SGD(self.net.parameters(), lr=0.01)
        self.body = Body()

    def act(self, state):
        pdparam = self.net(state)
        pd = Categorical(logits=pdparam)
        action = pd.sample()
        self.body.log_probs.append(pd.log_prob(action))
        self.body.entropies.append(pd.entropy())
        return action

    def calc_returns(self):
        rets, future = [], 0.0
        for r in reversed(self.body.rewards):
            future = r + self.gamma * future
            rets.insert(0, future)
        rets = torch.tensor(rets)
        return (rets - rets.mean()) / (rets.std() + 1e-8)

    def stacked_log_probs(self):
        return torch.tensor(self.body.log_probs)

    def calc_policy_loss(self, advs):
        log_probs = self.stacked_log_probs()
        policy_loss = -(log_probs * advs).mean()
        entropy = torch.stack(self.body.entropies).mean()
        return policy_loss - self.entropy_coef * entropy

    def train(self):
        advs = self.calc_returns()
        loss = self.calc_policy_loss(advs)
        self.optim.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in self.net.parameters()]


class ReinforceFixed(Reinforce):
    def stacked_log_probs(self):
        return torch.stack(self.body.log_probs)


def run_episode(agent, steps=6):
    gen = torch.Generator().manual_seed(1)
    for t in range(steps):
        state = torch.randn(4, generator=gen)
        action = agent.act(state)
        agent.body.rewards.append(float(action.item() == t % 3))
    return agent.train()


def grads_of(cls):
    torch.manual_seed(0)
    agent = cls()
    torch.manual_seed(1)
    return run_episode(agent)


if __name__ == "__main__":
    buggy = grads_of(Reinforce)
    fixed = grads_of(ReinforceFixed)
    same = all(torch.allclose(a, b) for a, b in zip(buggy, fixed))
    if not same:
        print("gradguard-case: gradients differ from the fix")
