# Source: https://github.com/databricks/megablocks/pull/70
# Title: "Change router weight norm from in-place"
# Thread: megablocks' LearnedRouter takes the top-k of the router's softmax scores and, when
# moe_normalize_expert_weights is set, normalises the selected expert weights with an in-place
# division by their p-norm. The norm saved the weights for its backward, so training fails with
# "one of the variables needed for gradient computation has been modified by an inplace
# operation ... output 0 of DivBackward0, is at version 1". The PR replaces the in-place division
# by `expert_weights = expert_weights / torch.norm(...)`.
# Kept: Arguments with hidden_size, moe_num_experts, moe_top_k, moe_jitter_eps,
# moe_normalize_expert_weights, uniform_expert_assignment and an init_method; the router's
# jitter, _top_k (max for k=1, topk otherwise), the normalisation, the uniform-assignment custom
# Function; an MoE layer combining expert MLP outputs with the expert weights, plus the
# load-balancing loss on the scores. Added: tiny sizes, a per-expert loop instead of the sparse
# kernels, random tokens and a regression target.
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F


@dataclass
class Arguments:
    hidden_size: int = 16
    ffn_hidden_size: int = 32
    moe_num_experts: int = 4
    moe_top_k: int = 2
    moe_jitter_eps: float = 0.01
    moe_normalize_expert_weights: float = 1.0
    moe_loss_weight: float = 0.1
    uniform_expert_assignment: bool = False
    init_method: object = field(default=partial(torch.nn.init.normal_, mean=0.0, std=0.02))
    device: str = "cpu"
    fp16: bool = False


def dtype(args):
    return torch.float16 if args.fp16 else torch.float32


class _UniformExpertAssignment(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, num_experts):
        out = torch.arange(x.numel(), dtype=x.dtype, device=x.device)
        return torch.remainder(out, num_experts).view(x.shape)


_uniform_expert_assignment = _UniformExpertAssignment.apply


class LearnedRouter(torch.nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.layer = torch.nn.Linear(args.hidden_size, args.moe_num_experts, bias=False,
                                     dtype=dtype(args), device=args.device)
        args.init_method(self.layer.weight)

    def jitter(self, x):
        low = 1.0 - self.args.moe_jitter_eps
        high = 1.0 + self.args.moe_jitter_eps
        noise = torch.rand(x.size(), dtype=x.dtype, device=x.device)
        return low + noise * (high - low)

    def _top_k(self, scores):
        if self.args.moe_top_k == 1:
            return scores.max(dim=-1, keepdim=True)
        return torch.topk(scores, self.args.moe_top_k, dim=-1)

    def forward(self, x):
        if self.training and self.args.moe_jitter_eps is not None:
            x = x * self.jitter(x)
        scores = self.layer(x.view(-1, x.shape[-1])).softmax(dim=-1)
        expert_weights, expert_indices = self._top_k(scores)
        if self.args.moe_normalize_expert_weights:
            expert_weights /= torch.norm(
                expert_weights, p=self.args.moe_normalize_expert_weights, dim=-1, keepdim=True)
        if self.args.moe_top_k == 1:
            expert_indices = expert_indices.squeeze(-1)
        expert_indices = (
            _uniform_expert_assignment(expert_indices, self.args.moe_num_experts)
            if self.args.uniform_expert_assignment else expert_indices
        )
        return scores, expert_weights, expert_indices


class MLPExperts(torch.nn.Module):
    def __init__(self, args):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.empty(args.moe_num_experts, args.hidden_size, args.ffn_hidden_size))
        self.w2 = torch.nn.Parameter(torch.empty(args.moe_num_experts, args.ffn_hidden_size, args.hidden_size))
        args.init_method(self.w1)
        args.init_method(self.w2)

    def forward(self, x, expert):
        return F.gelu(x @ self.w1[expert]) @ self.w2[expert]


def batched_load_balancing_loss(args, scores, expert_indices):
    tokens = scores.shape[0]
    counts = torch.bincount(expert_indices.flatten(), minlength=args.moe_num_experts).to(scores.dtype)
    return args.moe_loss_weight * args.moe_num_experts * (counts / tokens * scores.mean(0)).sum()


class MoE(torch.nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.router = LearnedRouter(args)
        self.experts = MLPExperts(args)

    def forward(self, x):
        in_shape = x.shape
        scores, expert_weights, expert_indices = self.router(x)
        tokens = x.view(-1, in_shape[-1])
        out = torch.zeros_like(tokens)
        for expert in range(self.args.moe_num_experts):
            token_idx, slot = torch.nonzero(expert_indices == expert, as_tuple=True)
            if token_idx.numel() == 0:
                continue
            y = self.experts(tokens[token_idx], expert)
            out = out.index_add(0, token_idx, y * expert_weights[token_idx, slot].unsqueeze(-1))
        aux = batched_load_balancing_loss(self.args, scores, expert_indices)
        return out.view(in_shape), aux


if __name__ == "__main__":
    torch.manual_seed(0)
    args = Arguments()
    moe = MoE(args)
    x = torch.randn(2, 6, args.hidden_size)
    target = torch.randn(2, 6, args.hidden_size)
    out, aux = moe(x)
    loss = F.mse_loss(out, target) + aux
    loss.backward()
    print(moe.router.layer.weight.grad.norm())
