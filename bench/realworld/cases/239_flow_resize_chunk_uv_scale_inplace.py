# Thread: https://github.com/pytorch/pytorch/issues/46820
# Title: "simple v *= v_scale error"
# Diagnosis from the thread: a flow-resizing helper splits a predicted optical-flow field with
# `u, v = flow.chunk(2, dim=1)` and rescales the two components in place (`u *= u_scale`, `v *= v_scale`) after
# interpolating the field to a new size. torch warned (1.7) and now refuses: the chunks are views returned by a
# multi-output function and may not be modified in place. The reporter's fix, endorsed in the thread, computes
# the scaled components out of place (u = u_scale * u, v = v_scale * v) and concatenates them.
# Kept: the resize helper (bilinear interpolation of the flow, per-axis scale = new size / old size, chunk into
# u and v, in-place scaling, cat back), used on the network's coarse flow to compare it with full-size ground
# truth. Added: a tiny two-frame flow CNN, random frames and flow target, an end-point-error loss and one step.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


def resize_flow(flow, size):
    _, _, h, w = flow.shape
    new_h, new_w = size
    flow = F.interpolate(flow, size=size, mode="bilinear", align_corners=False)
    u_scale, v_scale = new_w / w, new_h / h
    u, v = flow.chunk(2, dim=1)
    u *= u_scale
    v *= v_scale
    return torch.cat([u, v], dim=1)


class TinyFlowNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(6, 16, 3, stride=2, padding=1), nn.LeakyReLU(0.1),
                                     nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.LeakyReLU(0.1))
        self.predict_flow = nn.Conv2d(16, 2, 3, padding=1)

    def forward(self, frame1, frame2):
        return self.predict_flow(self.encoder(torch.cat([frame1, frame2], dim=1)))


def epe_loss(pred, target):
    return (pred - target).pow(2).sum(dim=1).sqrt().mean()


if __name__ == "__main__":
    net = TinyFlowNet()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-4)
    frame1, frame2 = torch.rand(2, 3, 32, 48), torch.rand(2, 3, 32, 48)
    flow_gt = torch.randn(2, 2, 32, 48)
    coarse = net(frame1, frame2)
    loss = epe_loss(resize_flow(coarse, flow_gt.shape[-2:]), flow_gt)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
