# Thread: https://github.com/kashif/firedup/issues/11
# Title: "ddpg torch error"
# Diagnosis from the thread: the PyTorch port of Spinning Up's DDPG computed the Q loss and the policy loss from
# one forward pass, then updated Q (backward + q_optimizer.step()) before the policy's backward; since torch 1.5
# the Q step rewrites the critic's weights that pi_loss's graph saved ("output 0 of TBackward ... is at version
# 2; expected version 1"). The reporter reordered the two gradient updates; the maintainer fixed it in the repo.
# Kept from the thread: the MLPActorCritic with pi and q heads, target networks with polyak averaging, one update()
# that builds both losses then steps Q then pi. Added: a random replay batch, sizes, a 2-update driver.
import copy

import torch
import torch.nn as nn

torch.manual_seed(0)


def mlp(sizes, activation=nn.ReLU, output_activation=nn.Identity):
    layers = []
    for j in range(len(sizes) - 1):
        act = activation if j < len(sizes) - 2 else output_activation
        layers += [nn.Linear(sizes[j], sizes[j + 1]), act()]
    return nn.Sequential(*layers)


class MLPActorCritic(nn.Module):
    def __init__(self, obs_dim=5, act_dim=2, hidden=(32, 32), act_limit=1.0):
        super().__init__()
        self.act_limit = act_limit
        self.policy = mlp([obs_dim, *hidden, act_dim], output_activation=nn.Tanh)
        self.q = mlp([obs_dim + act_dim, *hidden, 1])

    def pi(self, obs):
        return self.act_limit * self.policy(obs)

    def q_value(self, obs, act):
        return self.q(torch.cat([obs, act], dim=-1)).squeeze(-1)


def ddpg_update(main, target, pi_optimizer, q_optimizer, batch, gamma=0.99, polyak=0.995):
    obs, act, rew, obs2, done = batch
    q = main.q_value(obs, act)
    q_pi = main.q_value(obs, main.pi(obs))
    with torch.no_grad():
        q_pi_targ = target.q_value(obs2, target.pi(obs2))
        backup = rew + gamma * (1 - done) * q_pi_targ

    pi_loss = -q_pi.mean()
    q_loss = ((q - backup) ** 2).mean()

    q_optimizer.zero_grad()
    q_loss.backward()
    q_optimizer.step()

    pi_optimizer.zero_grad()
    pi_loss.backward()
    pi_optimizer.step()

    with torch.no_grad():
        for p, p_targ in zip(main.parameters(), target.parameters()):
            p_targ.mul_(polyak).add_((1 - polyak) * p)
    return pi_loss.item(), q_loss.item()


def sample_batch(n=16, obs_dim=5, act_dim=2):
    return (torch.randn(n, obs_dim), torch.rand(n, act_dim) * 2 - 1, torch.randn(n),
            torch.randn(n, obs_dim), (torch.rand(n) < 0.1).float())


if __name__ == "__main__":
    main = MLPActorCritic()
    target = copy.deepcopy(main)
    for p in target.parameters():
        p.requires_grad = False
    pi_optimizer = torch.optim.Adam(main.policy.parameters(), lr=1e-3)
    q_optimizer = torch.optim.Adam(main.q.parameters(), lr=1e-3)
    for it in range(2):
        print(ddpg_update(main, target, pi_optimizer, q_optimizer, sample_batch()))
