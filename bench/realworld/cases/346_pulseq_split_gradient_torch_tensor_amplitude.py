# Source: https://github.com/MRsources/pulseq-zero/issues/20
# Title: "Operation not differentiable"
# Thread: pulseq-zero is a differentiable (torch) re-implementation of pypulseq's sequence building.
# Its gradient helpers build the corner points of a trapezoid with torch.tensor([0, grad.amplitude])
# (and similar lines); when the amplitude is a zero-dimensional tensor that requires grad,
# torch.tensor drops requires_grad, so the pieces built from it are constants. The reporter
# proposes torch.stack([torch.as_tensor(x) for x in points]) and the maintainer fixed it that way.
# Kept: the TrapGrad / FreeGrad dataclasses (area, duration), make_trapezoid from an area on a
# raster, make_extended_trapezoid from corner amplitudes and times, and split_gradient cutting a
# trapezoid into ramp-up / flat-top / ramp-down extended trapezoids. Added: a tiny gradient-echo
# readout whose FOV parameter sets the readout amplitude, a prephaser, a moment loss over the
# split readout pieces and the prephaser, one Adam step on the FOV, and the comparison with the
# stacked corner points.
import math
from dataclasses import dataclass

import torch

GRAD_RASTER = 1e-5
MAX_SLEW = 1e8


@dataclass
class TrapGrad:
    channel: str
    amplitude: object
    rise_time: object
    flat_time: object
    fall_time: object
    delay: object = 0.0

    @property
    def area(self):
        return self.amplitude * (self.rise_time / 2 + self.flat_time + self.fall_time / 2)

    @property
    def duration(self):
        return self.delay + self.rise_time + self.flat_time + self.fall_time


@dataclass
class FreeGrad:
    channel: str
    waveform: torch.Tensor
    delay: object
    tt: torch.Tensor

    @property
    def area(self):
        return 0.5 * ((self.tt[1:] - self.tt[:-1]) * (self.waveform[1:] + self.waveform[:-1])).sum()


def ceil_raster(t):
    return math.ceil(float(t) / GRAD_RASTER) * GRAD_RASTER


def make_trapezoid(channel, flat_area=None, flat_time=None, area=None, duration=None):
    if flat_area is not None:
        amplitude = flat_area / flat_time
        rise = ceil_raster(abs(float(torch.as_tensor(amplitude).detach())) / MAX_SLEW) or GRAD_RASTER
        return TrapGrad(channel, amplitude, rise, flat_time, rise)
    rise = duration / 4
    flat = duration - 2 * rise
    return TrapGrad(channel, area / (rise + flat), rise, flat, rise)


def make_extended_trapezoid(channel, amplitudes, times):
    return FreeGrad(channel, amplitudes, times[0], times - times[0])


def split_gradient(grad):
    total = grad.duration
    ramp_up = make_extended_trapezoid(
        grad.channel,
        amplitudes=torch.tensor([0, grad.amplitude]),
        times=torch.tensor([0, grad.rise_time]),
    )
    flat_top = make_extended_trapezoid(
        grad.channel,
        amplitudes=torch.tensor([grad.amplitude, grad.amplitude]),
        times=torch.tensor([grad.rise_time, grad.rise_time + grad.flat_time]),
    )
    ramp_down = make_extended_trapezoid(
        grad.channel,
        amplitudes=torch.tensor([grad.amplitude, 0]),
        times=torch.tensor([grad.rise_time + grad.flat_time, total]),
    )
    return ramp_up, flat_top, ramp_down


def split_gradient_fixed(grad):
    total = grad.duration

    def join(*points):
        return torch.stack([torch.as_tensor(p, dtype=torch.float32) for p in points])

    return (
        make_extended_trapezoid(grad.channel, join(0, grad.amplitude), join(0, grad.rise_time)),
        make_extended_trapezoid(grad.channel, join(grad.amplitude, grad.amplitude),
                                join(grad.rise_time, grad.rise_time + grad.flat_time)),
        make_extended_trapezoid(grad.channel, join(grad.amplitude, 0),
                                join(grad.rise_time + grad.flat_time, total)),
    )


def build_readout(fov, n_read, adc_time, splitter):
    delta_k = 1 / fov
    gx = make_trapezoid("x", flat_area=n_read * delta_k, flat_time=adc_time)
    gx_pre = make_trapezoid("x", area=-gx.area / 2, duration=1e-3)
    return [gx_pre, *splitter(gx)]


def moment_loss(blocks, target_first_moment):
    m0 = sum(block.area for block in blocks)
    m1 = sum(block.area * (i + 1) for i, block in enumerate(blocks))
    return (m0 ** 2) + (m1 - target_first_moment) ** 2


def fov_grad(splitter):
    fov = torch.tensor(0.2, requires_grad=True)
    optimizer = torch.optim.Adam([fov], lr=1e-3)
    optimizer.zero_grad()
    blocks = build_readout(fov, n_read=64, adc_time=3.2e-3, splitter=splitter)
    loss = moment_loss(blocks, target_first_moment=50.0)
    loss.backward()
    grad = fov.grad.clone()
    optimizer.step()
    return grad


if __name__ == "__main__":
    g_bug = fov_grad(split_gradient)
    g_fix = fov_grad(split_gradient_fixed)
    if not torch.allclose(g_bug, g_fix):
        print("gradguard-case: gradients differ from the fix")
