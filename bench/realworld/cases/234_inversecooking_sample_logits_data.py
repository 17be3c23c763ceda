# Source: https://github.com/facebookresearch/inversecooking/issues/3
# Title: "Requires_grad is False"
# Diagnosis from the thread: the transformer ingredient decoder's sample() collects the per-step logits and
# returns `torch.stack(logits, 1).data`; the ingredient loss computed from them therefore has no graph, so the
# ingredient decoder gets no gradient from it (when the total loss also contains the recipe loss nothing fails -
# the decoder just stops learning). The fix (commit 3ab629c) drops `.data`. Kept from the thread: a transformer
# decoder whose sample() loops greedily over steps, appends logits, stacks them with `.data`; the inverse-cooking
# model combining the ingredient loss with the recipe (instruction) loss. Added: tiny encoders/decoders, sizes,
# a multi-label BCE ingredient loss, and the comparison with the fix.
import torch
import torch.nn as nn
import torch.nn.functional as F


class DecoderTransformer(nn.Module):
    def __init__(self, embed_size, vocab_size, seq_length, data_bug=True):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, embed_size)
        self.layer = nn.TransformerDecoderLayer(embed_size, 2, 2 * embed_size, dropout=0.0, batch_first=True)
        self.linear = nn.Linear(embed_size, vocab_size)
        self.seq_length = seq_length
        self.data_bug = data_bug

    def forward(self, captions, features):
        x = self.embed_tokens(captions)
        return self.linear(self.layer(x, features))

    def sample(self, features, first_token=0):
        sampled_ids = [torch.full((features.size(0),), first_token, dtype=torch.long)]
        logits = []
        for i in range(self.seq_length):
            outputs = self.forward(torch.stack(sampled_ids, 1), features)
            outputs = outputs[:, -1]
            logits.append(outputs)
            sampled_ids.append(outputs.argmax(-1))
        sampled_ids = torch.stack(sampled_ids[1:], 1)
        logits = torch.stack(logits, 1).data if self.data_bug else torch.stack(logits, 1)
        return sampled_ids, logits


class InverseCookingModel(nn.Module):
    def __init__(self, data_bug, vocab_ingrs=10, vocab_words=12, dim=8):
        super().__init__()
        self.image_encoder = nn.Sequential(nn.Conv2d(3, dim, 4, 4), nn.Flatten(2))
        self.ingredient_decoder = DecoderTransformer(dim, vocab_ingrs, seq_length=3, data_bug=data_bug)
        self.ingredient_encoder = nn.Embedding(vocab_ingrs, dim)
        self.recipe_decoder = DecoderTransformer(dim, vocab_words, seq_length=4)

    def forward(self, img_inputs, captions, target_ingrs):
        img_features = self.image_encoder(img_inputs).transpose(1, 2)
        _, ingr_logits = self.ingredient_decoder.sample(img_features)
        ingr_probs = torch.sigmoid(ingr_logits).max(dim=1).values
        target_one_hot = torch.zeros_like(ingr_probs).scatter_(1, target_ingrs, 1.0)
        ingr_loss = F.binary_cross_entropy(ingr_probs, target_one_hot)
        ingr_feats = self.ingredient_encoder(target_ingrs)  # teacher forcing with ground-truth ingredients
        features = torch.cat([img_features, ingr_feats], dim=1)
        outputs = self.recipe_decoder(captions[:, :-1], features)
        recipe_loss = F.cross_entropy(outputs.reshape(-1, outputs.size(-1)), captions[:, 1:].reshape(-1))
        return ingr_loss + recipe_loss


def grads(data_bug):
    torch.manual_seed(0)
    model = InverseCookingModel(data_bug)
    img = torch.randn(2, 3, 8, 8)
    captions = torch.randint(0, 12, (2, 5))
    target_ingrs = torch.randint(0, 10, (2, 3))
    model(img, captions, target_ingrs).backward()
    return [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


if __name__ == "__main__":
    buggy, fixed = grads(data_bug=True), grads(data_bug=False)
    same = all(torch.allclose(a, b) for a, b in zip(buggy, fixed))
    print("gradguard-case: gradients differ from the fix" if not same else "gradients match")
