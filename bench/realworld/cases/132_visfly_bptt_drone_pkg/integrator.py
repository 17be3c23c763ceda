# Part of case 132 (see main.py for the thread and diagnosis): the simulator's integrator.
import torch


class Integrator:
    def __init__(self, dt, method="euler"):
        self.dt = dt
        self.method = method

    def integrate(self, pos, vel, acc_fn):
        dt = self.dt
        if self.method == "euler":
            acc = acc_fn(vel)
            d_pos, d_vel = vel, acc
        else:
            k1_v, k1_a = vel, acc_fn(vel)
            k2_v = vel + 0.5 * dt * k1_a
            k2_a = acc_fn(k2_v)
            d_pos, d_vel = (k1_v + k2_v) / 2, (k1_a + k2_a) / 2
        pos += d_pos * dt
        vel += d_vel * dt
        return pos, vel
