"""mmdet 3.3.0, mmdet/models/task_modules/tracking/aflink.py:31 (GG005) and :37-39 (GG001), errors: real, latent.

`TemporalBlock.bn` normalises three slices of the conv output and writes them back into it:
    x[:, :, :, 0] = self.bnf(x[:, :, :, 0])      # and bnx / bny for slices 1 and 2
BatchNorm1d saves its input, a basic-indexing view of `x`, for backward; the slice assignments then
write into that storage (a view shares its base's version counter), and `forward` applies
`nn.ReLU(inplace=True)` to the same `x` afterwards.  Any backward through a TemporalBlock raises.
mmdet only runs the block at inference: `AFLinkModel.forward` asserts `not self.training` ("Only testing
is supported for AFLink") and its caller never backpropagates, so mmdet's own use is unaffected; anyone
training or fine-tuning AFLink (or reusing TemporalBlock) hits it.  The fix is out of place:
`x = torch.stack([self.bnf(x[..., 0]), self.bnx(x[..., 1]), self.bny(x[..., 2])], dim=-1)`.

mmdet does not import without mmcv's compiled ops, so the class is copied faithfully from
aflink.py:17-46 (BaseModule replaced by nn.Module; no other change).

    python bench/repro/mmdet_aflink_temporal_bn.py     # exits 0 when the bug reproduces
"""

import torch
from torch import Tensor, nn


class TemporalBlock(nn.Module):  # aflink.py:17
    def __init__(self, in_channel: int, out_channel: int, kernel_size: tuple = (7, 1), relu_inplace: bool = True,
                 stack: bool = False):
        super().__init__()
        self.conv = nn.Conv2d(in_channel, out_channel, kernel_size, bias=False)
        self.relu = nn.ReLU(inplace=relu_inplace)  # line 31 (mmdet: inplace=True)
        self.bnf = nn.BatchNorm1d(out_channel)
        self.bnx = nn.BatchNorm1d(out_channel)
        self.bny = nn.BatchNorm1d(out_channel)
        self.stack = stack  # False is mmdet's code; True is the out-of-place fix

    def bn(self, x: Tensor) -> Tensor:
        if self.stack:
            return torch.stack([self.bnf(x[:, :, :, 0]), self.bnx(x[:, :, :, 1]), self.bny(x[:, :, :, 2])], dim=-1)
        x[:, :, :, 0] = self.bnf(x[:, :, :, 0])  # line 37
        x[:, :, :, 1] = self.bnx(x[:, :, :, 1])  # line 38
        x[:, :, :, 2] = self.bny(x[:, :, :, 2])  # line 39
        return x

    def forward(self, x: Tensor) -> Tensor:
        x = self.conv(x)
        x = self.bn(x)
        x = self.relu(x)  # line 45
        return x


def backward_raises(block: TemporalBlock, train: bool = True) -> str | None:
    block.train(train)
    x = torch.randn(2, 1, 30, 3)  # AFLink's track input, [B, 1, 30, 3]
    try:
        block(x).sum().backward()
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e), e
        return str(e).splitlines()[0][:170]
    return None


torch.manual_seed(0)
reproduced = 0
for label, block in [("mmdet's TemporalBlock, train mode", TemporalBlock(1, 32)),
                     ("mmdet's TemporalBlock, eval mode (BN still saves its input)", TemporalBlock(1, 32)),
                     ("slice writes kept, ReLU(inplace=False)", TemporalBlock(1, 32, relu_inplace=False))]:
    err = backward_raises(block, train="eval" not in label)
    print(f"{label}: backward raises: {err}" if err else f"{label}: backward ok")
    reproduced += err is not None
err = backward_raises(TemporalBlock(1, 32, stack=True))
print("out-of-place torch.stack, ReLU(inplace=True) kept: " + ("backward ok (the fix)" if err is None else err))
with torch.no_grad():
    TemporalBlock(1, 32).eval()(torch.randn(2, 1, 30, 3))
print("under no_grad, as mmdet runs it: ok")
raise SystemExit(0 if reproduced == 3 and err is None else "did not reproduce")
