"""espnet 202511, espnet2/enh/separator/dpcl_separator.py:125 and dan_separator.py:147 (gradguard GG104, errors): real.

At inference both separators run K-means on the embeddings and start it from
    centers = tf_embedding[:, : self._num_spk, :].detach()
`.detach()` returns an alias: same storage and same version counter as `tf_embedding`, itself a view
of the mask nonlinearity's output (tanh by default; sigmoid and relu are the options, and all three
save their output).  The update `centers[b, i] = tf_embedding[b, label[b] == i].mean(dim=0)` therefore
writes into `tf_embedding`:
  * with grad enabled (eval mode without `torch.no_grad()`), backward raises, because the nonlinearity's
    saved output was modified;
  * under `torch.no_grad()` (espnet's inference), nothing raises but the first `num_spk` embeddings are
    silently overwritten by the centroids, so the K-means distances, labels and masks, and DPCL's returned
    `others["tf_embedding"]`, are computed from corrupted embeddings.
The fix is `.detach().clone()`.

espnet2's modules import the rest of espnet, so the eval branch is copied faithfully from
dpcl_separator.py:103-130 (dan_separator.py:106-148 is the same loop); the BLSTM + Linear before it is
stood in for by one Linear.

    python bench/repro/espnet_kmeans_detach_alias.py     # exits 0 when the bug reproduces
"""

import torch

B, T, F, D, num_spk = 1, 6, 5, 4, 2


def dpcl_eval(x, clone=False):  # dpcl_separator.py:103-130, eval branch
    x = torch.tanh(x)  # self.nonlinear, "tanh" by default
    tf_embedding = x.view(B, -1, D)
    centers = tf_embedding[:, :num_spk, :].detach()
    if clone:  # the fix
        centers = centers.clone()
    dist = torch.empty(B, T * F, num_spk, device=tf_embedding.device)
    last_label = torch.zeros(B, T * F, device=tf_embedding.device)
    while True:
        for i in range(num_spk):
            dist[:, :, i] = torch.sum((tf_embedding - centers[:, i, :].unsqueeze(1)) ** 2, dim=2)
        label = dist.argmin(dim=2)
        if torch.sum(label != last_label) == 0:
            break
        last_label = label
        for b in range(B):
            for i in range(num_spk):
                centers[b, i] = tf_embedding[b, label[b] == i].mean(dim=0)  # line 125
    return tf_embedding, label.view(B, T, F)


torch.manual_seed(1)
linear = torch.nn.Linear(3, F * D)  # stands in for BLSTM + Linear
feature = torch.randn(B, T, 3)

emb, _ = dpcl_eval(linear(feature), clone=True)
emb.sum().backward()
print("with .detach().clone(): backward ok (the fix)")

with torch.no_grad():
    pre = torch.tanh(linear(feature)).view(B, -1, D).clone()
    emb_fixed, label_fixed = dpcl_eval(linear(feature), clone=True)
    emb_bug, label_bug = dpcl_eval(linear(feature))
changed = (emb_bug != pre).any(dim=-1)[0]
assert torch.equal(emb_fixed, pre) and changed.any()
print(f"under no_grad: espnet's loop overwrote embeddings {changed.nonzero().flatten().tolist()} of {T * F} "
      f"(labels differ at {(label_bug != label_fixed).sum().item()} bins); the fix leaves them intact")

try:
    emb, _ = dpcl_eval(linear(feature))
    emb.sum().backward()
except RuntimeError as e:
    assert "modified by an inplace operation" in str(e), e
    print("eval mode with grad: backward raises:", str(e).splitlines()[0][:170])
    raise SystemExit(0)
raise SystemExit("did not reproduce")
