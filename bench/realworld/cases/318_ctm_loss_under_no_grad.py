# Source: https://github.com/Aaditya-Prasad/consistency-policy/issues/4
# Title: "CTM Loss Not Actually Used in the Student Training?"
# Thread: in the consistency-trajectory (CTM) student's loss, the student prediction `pred` is mapped
# to the start time by the EMA model inside a `with torch.no_grad():` block together with the target,
# so the resulting CTM loss has no grad_fn and contributes nothing to the student's update (changing
# its weight in the config changes nothing). The fix is to keep the pred branch out of no_grad so the
# gradient flows through the (frozen) EMA model into the student.
# Kept: student forward t->s with grad, EMA target u->s under no_grad, the second no_grad block that
# maps BOTH pred and target to the start time with the EMA model, Huber loss weighted into a
# total-loss dict next to a denoising loss. Added: a tiny MLP denoiser, the noise schedule stand-in,
# and the gradient comparison with the fixed loss.
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


class Denoiser(nn.Module):
    def __init__(self, dim=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim + 2, 32), nn.SiLU(), nn.Linear(32, dim))

    def forward(self, x, t, s):
        return self.net(torch.cat([x, t[:, None], s[:, None]], dim=-1))


def huber_loss(pred, target, delta=1.0):
    return F.huber_loss(pred, target, delta=delta)


class CTMStudent:
    def __init__(self, model, time_min=0.002, losses=None):
        self.model = model
        self.model_ema = copy.deepcopy(model).requires_grad_(False)
        self.time_min = time_min
        self.losses = losses or {"ctm": 1.0, "dsm": 1.0}

    def compute_loss(self, trajectory):
        n = trajectory.shape[0]
        times = torch.full((n,), 0.8)
        u_times = torch.full((n,), 0.6)
        stops = torch.full((n,), 0.3)
        noise = torch.randn_like(trajectory)
        noise_traj = trajectory + times[:, None] * noise
        u_noise_traj = trajectory + u_times[:, None] * noise
        total_loss = {}

        pred = self.model(noise_traj, times, stops)
        with torch.no_grad():
            target = self.model_ema(u_noise_traj, u_times, stops)
        with torch.no_grad():
            start = torch.full((n,), self.time_min)
            pred = self.model_ema(pred, stops, start)
            target = self.model_ema(target, stops, start)
        total_loss["ctm"] = huber_loss(pred, target) * self.losses["ctm"]

        denoised = self.model(noise_traj, times, torch.full((n,), self.time_min))
        total_loss["dsm"] = F.mse_loss(denoised, trajectory) * self.losses["dsm"]
        return sum(total_loss.values())


class CTMStudentFixed(CTMStudent):
    def compute_loss(self, trajectory):
        n = trajectory.shape[0]
        times = torch.full((n,), 0.8)
        u_times = torch.full((n,), 0.6)
        stops = torch.full((n,), 0.3)
        noise = torch.randn_like(trajectory)
        noise_traj = trajectory + times[:, None] * noise
        u_noise_traj = trajectory + u_times[:, None] * noise
        total_loss = {}

        pred = self.model(noise_traj, times, stops)
        start = torch.full((n,), self.time_min)
        pred = self.model_ema(pred, stops, start)
        with torch.no_grad():
            target = self.model_ema(u_noise_traj, u_times, stops)
            target = self.model_ema(target, stops, start)
        total_loss["ctm"] = huber_loss(pred, target) * self.losses["ctm"]

        denoised = self.model(noise_traj, times, torch.full((n,), self.time_min))
        total_loss["dsm"] = F.mse_loss(denoised, trajectory) * self.losses["dsm"]
        return sum(total_loss.values())


def student_grads(policy_cls, model, trajectory):
    torch.manual_seed(1)
    model.zero_grad()
    policy_cls(model).compute_loss(trajectory).backward()
    return [p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Denoiser()
    trajectory = torch.randn(8, 4)
    g_bug = student_grads(CTMStudent, model, trajectory)
    g_fix = student_grads(CTMStudentFixed, model, trajectory)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
