"""mmpretrain 1.2.0, mmpretrain/models/multimodal/clip/clip.py:359,361 and chinese_clip/chinese_clip.py:406,408
(gradguard GG001, errors): real, latent (inference-only code).

`prepare_text_prototype` (same lines in both models) normalises the text features in place:
    class_features = self.extract_text_feat(...)            # ends with `@ self.text_projection`
    class_features /= class_features.norm(dim=-1, keepdim=True)
    class_feature = class_features.mean(dim=0)
    class_feature /= class_feature.norm()
and keeps the result as `self.text_prototype_embeds`.  `.norm()` saves its input and `/=` overwrites it,
so with grad enabled any backward through the zero-shot logits (into the text encoder) raises.
It only runs from `predict()`, which mmengine's val/test loops call under `torch.no_grad()`; so
mmpretrain's own use is unaffected, and fine-tuning through the prototypes (prompt tuning) would raise.

mmpretrain does not import without mmcv's compiled ops, so the four lines are copied faithfully; the
text encoder is stood in for by an embedding and the projection matmul `@` that ends extract_text_feat.

    python bench/repro/mmpretrain_clip_text_prototype.py     # exits 0 when the bug reproduces
"""

import torch

torch.manual_seed(0)
token_embedding = torch.nn.Embedding(50, 16)
text_projection = torch.nn.Parameter(torch.randn(16, 8))


def prototype(tokens, in_place=True, second_in_place=None):
    second_in_place = in_place if second_in_place is None else second_in_place
    class_features = token_embedding(tokens).mean(dim=1) @ text_projection  # extract_text_feat(...)
    if in_place:  # mmpretrain's first line (clip.py:359, chinese_clip.py:406)
        class_features /= class_features.norm(dim=-1, keepdim=True)
    else:
        class_features = class_features / class_features.norm(dim=-1, keepdim=True)
    class_feature = class_features.mean(dim=0)
    if second_in_place:  # mmpretrain's second line (clip.py:361, chinese_clip.py:408)
        class_feature /= class_feature.norm()
    else:
        class_feature = class_feature / class_feature.norm()
    return class_feature


prompts = torch.randint(0, 50, (3, 5))  # 3 prompts of 5 tokens for one class
image_features = torch.randn(4, 8)

with torch.no_grad():  # how mmengine's test loop reaches predict()
    prototype(prompts)
print("under no_grad (mmpretrain's zero-shot predict): ok")
(image_features @ prototype(prompts, in_place=False)).sum().backward()
print("out of place, with grad: backward ok (the fix)")
for first, second in [(True, False), (False, True)]:  # each line alone
    try:
        (image_features @ prototype(prompts, first, second)).sum().backward()
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e), e
        print(f"only the {'first' if first else 'second'} line in place: backward raises")
    else:
        raise SystemExit("did not reproduce")
try:
    (image_features @ prototype(prompts)).sum().backward()
except RuntimeError as e:
    assert "modified by an inplace operation" in str(e), e
    print("mmpretrain's in-place lines, with grad: backward raises:", str(e).splitlines()[0][:170])
    raise SystemExit(0)
raise SystemExit("did not reproduce")
