# Thread: https://github.com/SJTU-ViSYS-team/VisFly/pull/35
# Title: "Fix BPTT autograd inplace errors in Dynamics.reset and Integrator.integrate"
# Diagnosis from the thread: training a policy by backpropagation through time across VisFly's differentiable
# drone simulator fails at actor_loss.backward() with "one of the variables needed for gradient computation has
# been modified by an inplace operation: [torch.FloatTensor [N, 3]], which is output 0 of AsStridedBackward0".
# Two in-place writes touch the state tensors whose transposed views (self.position = self._position.T) the
# reward and observation code already used: (1) Dynamics.reset(indices=...) rewrites self._position[:, indices]
# (and the velocity, time, ...) for the agents that hit an early done, and (2) Integrator.integrate advances the
# state with `pos += d_pos * dt` / `vel += ...` on the caller's tensors. Either alone invalidates saved views
# from earlier steps; the PR makes both out of place.
# Kept: the package split (integrator / dynamics / env / training script), state stored as (3, N) tensors with
# position/velocity properties returning .T views, Euler and RK4 branches, the partial reset on collisions or
# out-of-bounds, the reward reading the views, and a BPTT actor update over a rollout. Added: a point-mass
# model with drag instead of the full quadrotor, a DynamicsConfig dataclass, a small MLP actor, the horizon.
import torch
import torch.nn as nn

from .dynamics import DynamicsConfig
from .env import HoverEnv

torch.manual_seed(0)


def main(horizon=40):
    cfg = DynamicsConfig(num_agents=4)
    env = HoverEnv(cfg)
    actor = nn.Sequential(nn.Linear(6, 32), nn.Tanh(), nn.Linear(32, 3), nn.Tanh())
    optimizer = torch.optim.Adam(actor.parameters(), lr=1e-3)
    obs = env.reset()
    rewards = []
    for _ in range(horizon):
        action = actor(obs)
        obs, reward, done = env.step(action)
        rewards.append(reward)
    actor_loss = -torch.stack(rewards).sum(dim=0).mean()
    optimizer.zero_grad()
    actor_loss.backward()
    optimizer.step()


if __name__ == "__main__":
    main()
