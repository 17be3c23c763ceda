# Part of case 341 (see main.py for the thread and diagnosis): a small Qwen-VL-style model in the shape of a
# Hugging Face PreTrainedModel (config object, get_input_embeddings, gradient checkpointing flag, a
# LoRA-wrapped language model whose base weights are frozen as in QLoRA).
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.utils.checkpoint


@dataclass
class VLConfig:
    vocab_size: int = 64
    hidden_size: int = 32
    num_hidden_layers: int = 2
    vision_patch_dim: int = 12
    image_token_id: int = 5


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, r=4, alpha=8):
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / r

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling


class DecoderLayer(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.mlp = LoraLinear(nn.Linear(hidden, hidden, bias=False))

    def forward(self, h):
        return h + torch.tanh(self.mlp(self.norm(h)))


class VisionMerger(nn.Module):
    def __init__(self, patch_dim, hidden):
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(patch_dim, hidden), nn.GELU(), nn.Linear(hidden, hidden))

    def forward(self, pixel_values):
        return self.proj(pixel_values)


class VLForConditionalGeneration(nn.Module):
    def __init__(self, config: VLConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)
        self.visual = VisionMerger(config.vision_patch_dim, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config.hidden_size) for _ in range(config.num_hidden_layers))
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.lm_head.weight.requires_grad_(False)
        self.gradient_checkpointing = False

    def get_input_embeddings(self):
        return self.embed_tokens

    def gradient_checkpointing_enable(self):
        self.gradient_checkpointing = True

    def run_layers(self, hidden_states):
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                hidden_states = torch.utils.checkpoint.checkpoint(layer, hidden_states, use_reentrant=True)
            else:
                hidden_states = layer(hidden_states)
        return hidden_states
