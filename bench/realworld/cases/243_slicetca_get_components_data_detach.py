# Thread: https://github.com/arthur-pe/slicetca/pull/3
# Title: "fixing detaching gradients in get_components"
# Diagnosis from the thread: SliceTCA's get_components(detach=False) is meant to hand back the model's factor
# tensors still attached to the graph, but it reads every component through `.data` (detached for all options)
# and its `if not detach:` branch detaches again - the condition is backwards. Any loss built on the returned
# components (a penalty, a constraint, an invariance term) contributes no gradient to the factors, silently.
# The PR drops `.data` and detaches only `if detach`.
# Kept: a slice-tensor decomposition module holding, per partition, a slice vector and a slice tensor as
# parameters, construct() rebuilding the data tensor from them, get_components(detach, numpy) with the .data
# read and the inverted branch. Added: a 3-way random data tensor, a fit loss = reconstruction MSE plus an L2
# penalty written on get_components(), and the gradient comparison with the PR's get_components.
import torch
import torch.nn as nn

torch.manual_seed(0)


class SliceTCA(nn.Module):
    def __init__(self, dimensions, ranks):
        super().__init__()
        self.dimensions, self.ranks = dimensions, ranks
        vectors = []
        for k, rank in enumerate(ranks):
            others = [d for i, d in enumerate(dimensions) if i != k]
            vectors.append(nn.ParameterList([nn.Parameter(torch.randn(dimensions[k], rank) * 0.3),
                                             nn.Parameter(torch.randn(rank, *others) * 0.3)]))
        self.vectors = nn.ModuleList(vectors)

    def construct(self):
        total = 0.0
        for k, (u, v) in enumerate(self.vectors):
            slice_k = torch.einsum("ir,rjk->ijk", u, v)
            total = total + slice_k.movedim(0, k)
        return total

    def get_components(self, detach=False, numpy=False):
        components = []
        for partition in self.vectors:
            vs = [v.data for v in partition]
            if not detach:
                vs = [v.detach() for v in vs]
            if numpy:
                vs = [v.cpu().numpy() for v in vs]
            components.append(vs)
        return components


class SliceTCAFixed(SliceTCA):
    def get_components(self, detach=False, numpy=False):
        components = []
        for partition in self.vectors:
            vs = [v for v in partition]
            if detach:
                vs = [v.detach() for v in vs]
            if numpy:
                vs = [v.cpu().numpy() for v in vs]
            components.append(vs)
        return components


def fit_grads(model, data, weight_decay=0.1):
    model.zero_grad()
    loss = (model.construct() - data).pow(2).mean()
    for partition in model.get_components():
        for component in partition:
            loss = loss + weight_decay * component.pow(2).sum()
    loss.backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    data = torch.randn(6, 5, 4)
    buggy = SliceTCA((6, 5, 4), ranks=(1, 1, 0))
    fixed = SliceTCAFixed((6, 5, 4), ranks=(1, 1, 0))
    fixed.load_state_dict(buggy.state_dict())
    g_bug, g_fix = fit_grads(buggy, data), fit_grads(fixed, data)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
