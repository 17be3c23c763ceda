# Source: https://github.com/dragen1860/MAML-Pytorch/issues/40
# Title: "questions with respect to the no_grad()"
# Thread: with `update_step = 1` the meta-learner raises "element 0 of tensors does not require grad
# and does not have a grad_fn". The answer: the query losses for step 0 (before the update) and step 1
# (after the first fast-weight update) are computed under `torch.no_grad()`; the loop
# `for k in range(1, self.update_step)` that computes the differentiable losses is skipped when
# update_step is 1, so `loss_q = losses_q[-1] / task_num` is a loss computed under no_grad.
# Kept: the Meta.forward structure (per-task inner loop with fast weights via autograd.grad,
# losses_q list, the two no_grad query evaluations, the range(1, update_step) loop, meta update on
# losses_q[-1]). Added: a functional 2-layer MLP learner, tiny random tasks.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Learner(nn.Module):
    def __init__(self, n_in=5, n_hidden=16, n_way=3):
        super().__init__()
        self.vars = nn.ParameterList([
            nn.Parameter(torch.randn(n_hidden, n_in) * 0.3), nn.Parameter(torch.zeros(n_hidden)),
            nn.Parameter(torch.randn(n_way, n_hidden) * 0.3), nn.Parameter(torch.zeros(n_way)),
        ])

    def forward(self, x, vars=None):
        w1, b1, w2, b2 = self.vars if vars is None else vars
        return F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)


class Meta(nn.Module):
    def __init__(self, update_step=1, update_lr=0.4, meta_lr=1e-3):
        super().__init__()
        self.update_step = update_step
        self.update_lr = update_lr
        self.net = Learner()
        self.meta_optim = torch.optim.Adam(self.net.parameters(), lr=meta_lr)

    def forward(self, x_spt, y_spt, x_qry, y_qry):
        task_num = x_spt.size(0)
        losses_q = [0 for _ in range(self.update_step + 1)]
        for i in range(task_num):
            logits = self.net(x_spt[i])
            loss = F.cross_entropy(logits, y_spt[i])
            grad = torch.autograd.grad(loss, self.net.parameters())
            fast_weights = [p - self.update_lr * g for g, p in zip(grad, self.net.parameters())]

            with torch.no_grad():
                logits_q = self.net(x_qry[i], self.net.parameters())
                losses_q[0] += F.cross_entropy(logits_q, y_qry[i])
            with torch.no_grad():
                logits_q = self.net(x_qry[i], fast_weights)
                losses_q[1] += F.cross_entropy(logits_q, y_qry[i])

            for k in range(1, self.update_step):
                logits = self.net(x_spt[i], fast_weights)
                loss = F.cross_entropy(logits, y_spt[i])
                grad = torch.autograd.grad(loss, fast_weights)
                fast_weights = [p - self.update_lr * g for g, p in zip(grad, fast_weights)]
                logits_q = self.net(x_qry[i], fast_weights)
                losses_q[k + 1] += F.cross_entropy(logits_q, y_qry[i])

        loss_q = losses_q[-1] / task_num
        self.meta_optim.zero_grad()
        loss_q.backward()
        self.meta_optim.step()
        return loss_q.item()


if __name__ == "__main__":
    torch.manual_seed(0)
    task_num, n_way, k_shot, k_query = 2, 3, 2, 4
    x_spt = torch.randn(task_num, n_way * k_shot, 5)
    y_spt = torch.arange(n_way).repeat(k_shot).expand(task_num, -1)
    x_qry = torch.randn(task_num, n_way * k_query, 5)
    y_qry = torch.arange(n_way).repeat(k_query).expand(task_num, -1)
    maml = Meta(update_step=1)
    maml(x_spt, y_spt, x_qry, y_qry)
