# Part of case 341 (see main.py for the thread and diagnosis): the repository's replacement forward, which
# scatters the vision features into the token embeddings at the image-token rows.
import torch.nn.functional as F


def replace_qwen_vl_forward(model_cls):
    def forward(self, input_ids, pixel_values, labels=None):
        inputs_embeds = self.get_input_embeddings()(input_ids)
        if pixel_values is not None:
            image_embeds = self.visual(pixel_values).to(inputs_embeds.dtype)
            flat = inputs_embeds.view(-1, inputs_embeds.size(-1))
            row_idx = (input_ids.view(-1) == self.config.image_token_id).nonzero().squeeze(1)
            flat.index_copy_(0, row_idx, image_embeds)
        hidden_states = self.run_layers(inputs_embeds)
        logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1))
        return loss, logits

    model_cls.forward = forward
