# Source: https://github.com/TianWuYuJiangHenShou/LabelSemantics/issues/5
# Title: (quoted summary) "1、token representation和label representation独自更新(使用了两个bert encoder)..."
# Thread: a label-semantics NER model encodes the tokens with one BERT encoder and the label names with
# a second one, and stores the label representation on the model (`self.label_representation`),
# computed once (in __init__ or cached across steps) without detach. Training then fails at
# loss.backward() with "modified by an inplace operation: [768, 768] ... output 0 of TBackward, is at
# version 3; expected version 2": the cached representation's graph holds the label encoder's weights,
# which optimizer.step() updated in place. The working fix in the thread: detach when assigning
# self.label_representation (or recompute it in every forward with shared parameters).
# Kept: a config object, a PreTrainedModel-style wrapper with two encoders, the label representation
# cached on the model without detach and reused by later steps, logits = tokens x labels^T, and an
# output dataclass with loss/logits. Added: tiny embedding+linear "encoders" instead of BERT,
# retain_graph=True in the training loop (the reporter's version counts imply the graph was retained;
# without it the second step fails earlier with "backward through the graph a second time").
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LabelSemanticsConfig:
    vocab_size: int = 30
    hidden_size: int = 8
    num_labels: int = 4
    label_name_len: int = 3


@dataclass
class TokenClassifierOutput:
    loss: Optional[torch.Tensor] = None
    logits: Optional[torch.Tensor] = None


class TinyEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, input_ids):
        return torch.tanh(self.dense(self.embeddings(input_ids)))


class PreTrainedModelStub(nn.Module):
    config_class = LabelSemanticsConfig

    def __init__(self, config):
        super().__init__()
        self.config = config


class LabelSemanticsForNER(PreTrainedModelStub):
    def __init__(self, config, label_input_ids):
        super().__init__(config)
        self.token_encoder = TinyEncoder(config)
        self.label_encoder = TinyEncoder(config)
        self.label_input_ids = label_input_ids
        self.label_representation = None

    def get_label_representation(self):
        if self.label_representation is None:
            self.label_representation = self.label_encoder(self.label_input_ids)[:, 0]
        return self.label_representation

    def forward(self, input_ids, labels=None):
        token_repr = self.token_encoder(input_ids)
        logits = token_repr @ self.get_label_representation().t()
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, self.config.num_labels), labels.reshape(-1))
        return TokenClassifierOutput(loss=loss, logits=logits)


if __name__ == "__main__":
    torch.manual_seed(0)
    config = LabelSemanticsConfig()
    label_input_ids = torch.randint(0, config.vocab_size, (config.num_labels, config.label_name_len))
    model = LabelSemanticsForNER(config, label_input_ids)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(2):
        input_ids = torch.randint(0, config.vocab_size, (2, 5))
        labels = torch.randint(0, config.num_labels, (2, 5))
        optimizer.zero_grad()
        outputs = model(input_ids, labels=labels)
        outputs.loss.backward(retain_graph=True)
        optimizer.step()
