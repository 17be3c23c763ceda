# Source: https://github.com/kc-ml2/meent/pull/107
# Title: "Keep the autograd graph on every differentiable solver input"
# Thread: meent's torch RCWA solver stores its inputs through property setters; for a thickness
# given as a list or tuple the setter calls torch.tensor(thickness, ...), which copies the values
# out of any tensor in the list and returns a new leaf. A per-layer thickness written as
# [t, 200e-9] with t requiring grad (the natural way to optimise one layer) therefore reaches the
# solver with no graph, and t never gets a gradient. The PR builds such lists with torch.stack of
# the elements (converted with as_tensor) so the graph is kept.
# Kept: _BaseRCWA's device/type_complex handling, the theta/period/thickness property setters
# (int/float, list/tuple/ndarray, Tensor branches), a layer loop from the last layer down that
# reads self.thickness[layer_index], and a solve returning reflectance. Added: a normal-incidence
# thin-film characteristic-matrix solve instead of the Fourier-space RCWA, two layers, one Adam
# step on (t, eps), and the comparison of the gradients with the stacked-thickness setter.
import numpy as np
import torch


class _BaseRCWA:
    def __init__(self, n_top=1.0, n_bot=1.5, theta=0.0, period=(1.0, 1.0), wavelength=1.0,
                 thickness=(0.0,), device="cpu", type_complex=torch.complex128, perturbation=1e-20):
        if device in (0, "cpu"):
            self._device = torch.device("cpu")
        elif isinstance(device, torch.device):
            self._device = device
        else:
            raise ValueError("device")
        if type_complex in (0, torch.complex128, np.complex128):
            self._type_complex = torch.complex128
        elif type_complex in (1, torch.complex64, np.complex64):
            self._type_complex = torch.complex64
        else:
            raise ValueError("type_complex")
        self._type_float = torch.float64 if self._type_complex is not torch.complex64 else torch.float32
        self.perturbation = perturbation
        self.n_top = n_top
        self.n_bot = n_bot
        self.theta = theta
        self.period = period
        self.wavelength = wavelength
        self.thickness = thickness

    @property
    def device(self):
        return self._device

    @property
    def type_complex(self):
        return self._type_complex

    @property
    def type_float(self):
        return self._type_float

    @property
    def theta(self):
        return self._theta

    @theta.setter
    def theta(self, theta):
        self._theta = torch.tensor(theta, device=self.device, dtype=self.type_complex)
        self._theta = torch.where(self._theta == 0, self.perturbation, self._theta)

    @property
    def period(self):
        return self._period

    @period.setter
    def period(self, period):
        if type(period) in (int, float):
            self._period = torch.tensor([period, period], device=self.device, dtype=self.type_float)
        else:
            if len(period) == 1:
                period = [period[0], period[0]]
            self._period = torch.tensor(period, device=self.device, dtype=self.type_float)

    @property
    def thickness(self):
        return self._thickness

    @thickness.setter
    def thickness(self, thickness):
        if type(thickness) in (int, float):
            self._thickness = torch.tensor([thickness], device=self.device, dtype=self.type_float)
        elif type(thickness) in (list, tuple, np.ndarray):
            self._thickness = torch.tensor(thickness, device=self.device, dtype=self.type_float)
        elif isinstance(thickness, torch.Tensor):
            self._thickness = thickness.to(device=self.device, dtype=self.type_float)
        else:
            raise ValueError

    def solve_1d(self, wavelength, eps_all):
        k0 = 2 * torch.pi / wavelength
        m = torch.eye(2, dtype=self.type_complex, device=self.device)
        for layer_index in range(len(self.thickness))[::-1]:
            n = torch.sqrt(eps_all[layer_index].to(self.type_complex))
            d = self.thickness[layer_index]
            delta = k0 * n * d
            layer = torch.stack([
                torch.stack([torch.cos(delta), 1j * torch.sin(delta) / n]),
                torch.stack([1j * n * torch.sin(delta), torch.cos(delta)]),
            ])
            m = layer @ m
        b, c = m @ torch.tensor([1.0, self.n_bot], dtype=self.type_complex, device=self.device)
        r = (self.n_top * b - c) / (self.n_top * b + c)
        return (r * r.conj()).real


class RCWA(_BaseRCWA):
    def conv_solve(self, eps_all):
        return self.solve_1d(self.wavelength, eps_all)


class RCWAFixed(RCWA):
    @_BaseRCWA.thickness.setter
    def thickness(self, thickness):
        if type(thickness) in (list, tuple):
            self._thickness = torch.stack([torch.as_tensor(v, dtype=self.type_float) for v in thickness])
        else:
            _BaseRCWA.thickness.fset(self, thickness)


def reflectance_grads(solver_cls):
    t = torch.tensor(120e-9, dtype=torch.float64, requires_grad=True)
    eps1 = torch.tensor(4.0, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([t, eps1], lr=1e-9)
    optimizer.zero_grad()
    solver = solver_cls(n_top=1.0, n_bot=1.5, wavelength=600e-9, thickness=[t, 200e-9])
    reflectance = solver.conv_solve([eps1, torch.tensor(2.1, dtype=torch.float64)])
    reflectance.backward()
    grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in (t, eps1)]
    optimizer.step()
    return grads


if __name__ == "__main__":
    g_bug = reflectance_grads(RCWA)
    g_fix = reflectance_grads(RCWAFixed)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
