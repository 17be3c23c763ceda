# Source: https://github.com/WongKinYiu/yolov7/issues/1935
# Title: "it reported an error in loss.backward()"
# Diagnosis from the thread: for test-time adaptation the user computes a loss from the *inference* outputs of
# the model; in eval mode YOLO's Detect head takes `y = x[i].sigmoid()` and then decodes boxes by writing into y
# in place (`y[..., 0:2] = ...`, `y[..., 2:4] = ...`), so backward fails in SigmoidBackward (sigmoid saved its
# output). Decoding out of place (building xy / wh and concatenating, as later YOLO heads do when inplace=False)
# avoids it. Kept from the thread: the Detect head (per-level 1x1 conv, view/permute to (bs, na, ny, nx, no),
# grid and anchor_grid, the in-place xy / wh decode in eval mode, returning (cat(z), x)), the adapt_single step
# taking an optimizer step on a loss over `outputs`. Added: a toy backbone, sizes, an entropy-style TTA loss.
import torch
import torch.nn as nn


class Detect(nn.Module):
    stride = None
    export = False

    def __init__(self, nc=2, anchors=((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119)), ch=(8, 16)):
        super().__init__()
        self.nc = nc
        self.no = nc + 5
        self.nl = len(anchors)
        self.na = len(anchors[0]) // 2
        self.grid = [torch.zeros(1)] * self.nl
        a = torch.tensor(anchors).float().view(self.nl, -1, 2)
        self.register_buffer("anchors", a)
        self.register_buffer("anchor_grid", a.clone().view(self.nl, 1, -1, 1, 1, 2))
        self.m = nn.ModuleList(nn.Conv2d(x, self.no * self.na, 1) for x in ch)

    def forward(self, x):
        z = []
        self.training |= self.export
        for i in range(self.nl):
            x[i] = self.m[i](x[i])
            bs, _, ny, nx = x[i].shape
            x[i] = x[i].view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous()
            if not self.training:  # inference
                if self.grid[i].shape[2:4] != x[i].shape[2:4]:
                    self.grid[i] = self._make_grid(nx, ny).to(x[i].device)
                y = x[i].sigmoid()
                y[..., 0:2] = (y[..., 0:2] * 2. - 0.5 + self.grid[i]) * self.stride[i]  # xy
                y[..., 2:4] = (y[..., 2:4] * 2) ** 2 * self.anchor_grid[i]  # wh
                z.append(y.view(bs, -1, self.no))
        return x if self.training else (torch.cat(z, 1), x)

    @staticmethod
    def _make_grid(nx=20, ny=20):
        yv, xv = torch.meshgrid([torch.arange(ny), torch.arange(nx)], indexing="ij")
        return torch.stack((xv, yv), 2).view((1, 1, ny, nx, 2)).float()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.p3 = nn.Sequential(nn.Conv2d(3, 8, 3, 4, 1), nn.SiLU())
        self.p4 = nn.Sequential(nn.Conv2d(8, 16, 3, 2, 1), nn.SiLU())
        self.detect = Detect()
        self.detect.stride = torch.tensor([4.0, 8.0])

    def forward(self, x):
        a = self.p3(x)
        b = self.p4(a)
        return self.detect([a, b])


def adapt_single(image, optimizer, batch_size, model):
    model.eval()
    inputs_t = image.repeat(batch_size, 1, 1, 1)
    outputs, train_output = model(inputs_t)  # [batch_size, num_boxes, 5 + nc]
    conf = outputs[..., 4:5] * outputs[..., 5:]
    loss = -(conf * torch.log(conf + 1e-6)).sum(-1).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Model()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    image = torch.rand(1, 3, 32, 32)
    adapt_single(image, optimizer, batch_size=2, model=model)
    print("ok")
