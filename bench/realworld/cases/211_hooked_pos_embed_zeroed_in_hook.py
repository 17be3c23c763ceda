# Source: https://github.com/TransformerLensOrg/TransformerLens/issues/157
# Title: "In-place operations on `hook_pos_embed` are dangerous"
# Diagnosis from the thread: the positional-embedding module returns `einops.repeat(W_pos[:T], ...)`, which is an
# expand view of the parameter; a forward hook that writes into its argument (`z[:] = 0` / `z[1, :] = 0`) while
# grad is disabled silently overwrites W_pos itself, and every later run and gradient uses the corrupted
# parameter. The maintainers' fix is to clone the repeated embedding. Kept from the thread: a hooked transformer
# with a HookPoint on the positional embedding built with einops.repeat, run_with_hooks under
# torch.set_grad_enabled(False) with a hook editing the batch row in place, then normal use. Added: a tiny model,
# the later fine-tuning step whose gradients are compared with the cloned-embedding fix.
import torch
import torch.nn as nn
import einops


class HookPoint(nn.Module):
    def __init__(self):
        super().__init__()
        self.fwd_hooks = []

    def add_hook(self, fn):
        self.fwd_hooks.append(self.register_forward_hook(lambda module, inp, out: fn(out, hook=module)))

    def remove_hooks(self):
        for h in self.fwd_hooks:
            h.remove()
        self.fwd_hooks = []

    def forward(self, x):
        return x


class PosEmbed(nn.Module):
    def __init__(self, n_ctx, d_model, clone=False):
        super().__init__()
        self.W_pos = nn.Parameter(torch.randn(n_ctx, d_model) * 0.1)
        self.clone = clone

    def forward(self, tokens):
        batch, pos = tokens.shape
        pos_embed = einops.repeat(self.W_pos[:pos], "pos d -> batch pos d", batch=batch)
        return pos_embed.clone() if self.clone else pos_embed


class HookedTransformer(nn.Module):
    def __init__(self, d_vocab=11, n_ctx=6, d_model=8, clone_pos=False):
        super().__init__()
        self.embed = nn.Embedding(d_vocab, d_model)
        self.pos_embed = PosEmbed(n_ctx, d_model, clone=clone_pos)
        self.hook_pos_embed = HookPoint()
        self.block = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, d_model), nn.GELU())
        self.unembed = nn.Linear(d_model, d_vocab)

    def forward(self, tokens):
        resid = self.embed(tokens) + self.hook_pos_embed(self.pos_embed(tokens))
        resid = resid + self.block(resid)
        return self.unembed(resid)

    def run_with_hooks(self, tokens, fwd_hooks):
        for name, fn in fwd_hooks:
            getattr(self, name).add_hook(fn)
        try:
            return self(tokens)
        finally:
            for name, _ in fwd_hooks:
                getattr(self, name).remove_hooks()


def sketchy_edit_batch_1_pos_embed(z, hook):
    z[1, :] = 0.0
    return z


def analyse_then_finetune(clone_pos):
    torch.manual_seed(0)
    model = HookedTransformer(clone_pos=clone_pos)
    tokens = torch.randint(0, 11, (2, 5))
    torch.set_grad_enabled(False)
    model.run_with_hooks(tokens, fwd_hooks=[("hook_pos_embed", sketchy_edit_batch_1_pos_embed)])
    torch.set_grad_enabled(True)
    logits = model(tokens)
    loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 11), tokens[:, 1:].reshape(-1))
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    buggy = analyse_then_finetune(clone_pos=False)
    fixed = analyse_then_finetune(clone_pos=True)
    same = all(torch.allclose(a, b) for a, b in zip(buggy, fixed))
    print("gradguard-case: gradients differ from the fix" if not same else "gradients match")
