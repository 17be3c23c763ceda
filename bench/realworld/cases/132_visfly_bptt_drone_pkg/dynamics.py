# Part of case 132 (see main.py for the thread and diagnosis): point-mass quadrotor dynamics, state kept as
# (3, N) tensors on the object and integrated by Integrator.
from dataclasses import dataclass

import torch

from .integrator import Integrator


@dataclass
class DynamicsConfig:
    num_agents: int = 4
    mass: float = 1.0
    dt: float = 0.05
    linear_drag: float = 0.1
    quad_drag: float = 0.05
    integrator: str = "euler"


class Dynamics:
    def __init__(self, cfg: DynamicsConfig):
        self.cfg = cfg
        self.integrator = Integrator(cfg.dt, cfg.integrator)
        self.gravity = torch.tensor([[0.0], [0.0], [-9.81]])
        self._position = torch.zeros(3, cfg.num_agents)
        self._velocity = torch.zeros(3, cfg.num_agents)
        self._thrusts = torch.zeros(3, cfg.num_agents)
        self._t = torch.zeros(cfg.num_agents)

    def reset(self, pos=None, vel=None, indices=None):
        if indices is None:
            self._position = torch.zeros(3, self.cfg.num_agents) if pos is None else pos.T.clone()
            self._velocity = torch.zeros(3, self.cfg.num_agents) if vel is None else vel.T.clone()
            self._t = torch.zeros(self.cfg.num_agents)
        else:
            self._position[:, indices] = 0.0 if pos is None else pos.T
            self._velocity[:, indices] = 0.0 if vel is None else vel.T
            self._t[indices] = 0.0

    def _acceleration(self, vel):
        drag = -self.cfg.linear_drag * vel - self.cfg.quad_drag * vel * vel.abs()
        return self._thrusts / self.cfg.mass + self.gravity + drag

    def step(self, action):
        self._thrusts = action.T * 15.0
        self._position, self._velocity = self.integrator.integrate(self._position, self._velocity,
                                                                   self._acceleration)
        self._t = self._t + self.cfg.dt

    @property
    def position(self):
        return self._position.T

    @property
    def velocity(self):
        return self._velocity.T
