# Thread: https://github.com/2U1/Qwen-VL-Series-Finetune/pull/178
# Title: "[Fix] RuntimeError: a view of a leaf Variable that requires grad is being used in an in-place
#         operation."
# Diagnosis from the thread: fine-tuning Qwen2.5-VL 3B with QLoRA and gradient checkpointing fails in the
# repository's monkey-patched forward (src/train/monkey_patch_forward.py) at `flat.index_copy_(0, row_idx,
# img)`, where `flat` is a flattened view of the token embeddings and the image features are written into the
# image-token rows. With the base model frozen and gradient checkpointing on, the training setup makes the
# embedding output require grad through a forward hook (requires_grad_ on the output of a frozen embedding),
# so inputs_embeds is a leaf that requires grad and `flat` is a view of it. The PR (approved by the
# maintainer, who ported it to the other model versions) writes it out of place:
# `flat = flat.index_copy(0, row_idx, img)` (and uses the result).
# Kept: the package split (model / monkey-patched forward / training script), the view-then-index_copy_ merge
# of vision features at image-token rows, frozen base weights with LoRA adapters, gradient checkpointing and
# the input-embedding hook that makes checkpointed layers see inputs requiring grad.
# Added: a tiny config dataclass, a two-layer decoder, one vision merger, random tokens with two image tokens
# per sample, one optimizer step.
import torch

from .modeling import VLConfig, VLForConditionalGeneration
from .monkey_patch_forward import replace_qwen_vl_forward

torch.manual_seed(0)


def make_inputs_require_grad(module, input, output):
    output.requires_grad_(True)


def main():
    replace_qwen_vl_forward(VLForConditionalGeneration)
    config = VLConfig()
    model = VLForConditionalGeneration(config)
    model.gradient_checkpointing_enable()
    model.get_input_embeddings().register_forward_hook(make_inputs_require_grad)
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    input_ids = torch.randint(10, config.vocab_size, (2, 10))
    input_ids[:, 1:3] = config.image_token_id
    pixel_values = torch.randn(4, config.vision_patch_dim)
    loss, _ = model(input_ids, pixel_values, labels=input_ids)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


if __name__ == "__main__":
    main()
