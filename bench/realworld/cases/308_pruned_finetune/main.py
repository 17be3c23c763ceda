# Source: https://github.com/microsoft/nni/issues/4521
# Title: "The parameters are not updated when the pruned model is finetuned"
# Thread: after pruning, `ModelSpeedup(...).speedup_model()` replaces the masked layers with smaller
# ones and copies the kept weights into them, but the optimizer had been built from the original
# model's parameters, so fine-tuning updates stale tensors and the new layers never change. The
# maintainer's fix: re-create the optimizer after speedup (the reporter confirmed it works).
# Kept: build optimizer -> speedup replaces layers -> fine-tune; the fix builds the optimizer after
# speedup. Added: a package split into model / speedup / finetune modules, a small conv net, a
# toy channel-pruning speedup, and the comparison of the gradients the optimizer will apply.
import torch

from .finetune import prune_then_finetune, prune_then_finetune_fixed
from .model import SmallConvNet


def optimizer_grads(optimizer):
    grads = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            grads.append(torch.zeros_like(p) if p.grad is None else p.grad.clone())
    return grads


def main():
    torch.manual_seed(0)
    images, labels = torch.randn(4, 3, 6, 6), torch.tensor([0, 1, 2, 3])
    base = SmallConvNet()
    buggy, fixed = SmallConvNet(), SmallConvNet()
    buggy.load_state_dict(base.state_dict())
    fixed.load_state_dict(base.state_dict())
    g_bug = optimizer_grads(prune_then_finetune(buggy, images, labels))
    g_fix = optimizer_grads(prune_then_finetune_fixed(fixed, images, labels))
    same = len(g_bug) == len(g_fix) and all(
        a.shape == b.shape and torch.allclose(a, b) for a, b in zip(g_bug, g_fix)
    )
    if not same:
        print("gradguard-case: gradients differ from the fix")


if __name__ == "__main__":
    main()
