# Part of case 132 (see main.py for the thread and diagnosis): a hovering task whose reward reads the state
# through the dynamics' transposed views, as VisFly's reward functions do.
import torch

from .dynamics import Dynamics


class HoverEnv:
    def __init__(self, cfg, target=(0.0, 0.0, 1.0), bound=3.0):
        self.dynamics = Dynamics(cfg)
        self.target = torch.tensor(target).expand(cfg.num_agents, 3)
        self.bound = bound

    @property
    def position(self):
        return self.dynamics.position

    @property
    def velocity(self):
        return self.dynamics.velocity

    def get_observation(self):
        return torch.cat([self.position - self.target, self.velocity], dim=1)

    def get_reward(self):
        return -(self.position - self.target).norm(dim=1) - 0.01 * (self.velocity * self.velocity).sum(dim=1)

    def get_done(self):
        return (self.position.abs() > self.bound).any(dim=1)

    def reset(self):
        self.dynamics.reset()
        return self.get_observation()

    def step(self, action):
        self.dynamics.step(action)
        reward = self.get_reward()
        done = self.get_done()
        if done.any():
            self.dynamics.reset(indices=done.nonzero().flatten())
        return self.get_observation(), reward, done
