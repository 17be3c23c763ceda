# Source: https://github.com/facebookresearch/moco/issues/21
# Title: "Question about cloning the queue"
# Diagnosis from the thread: MoCo computes the negative logits against its memory queue with
# einsum('nc,ck->nk', [q, queue]) and, still inside forward, enqueues the new keys by writing into that queue in
# place (_dequeue_and_enqueue); the maintainer explains that `self.queue.clone().detach()` is there because the
# einsum saves the queue for backward - without the clone PyTorch raises at backward. Kept from the thread: the
# MoCo builder (encoder_q / encoder_k, momentum update, registered queue buffer and queue_ptr, positive and
# negative logits, temperature, dequeue-and-enqueue writing keys into queue[:, ptr:ptr + batch]) with the einsum
# on the raw queue. Added: small MLP encoders, sizes, one InfoNCE step.
import torch
import torch.nn as nn
import torch.nn.functional as F


class MoCo(nn.Module):
    def __init__(self, base_encoder, dim=8, K=16, m=0.999, T=0.07):
        super().__init__()
        self.K, self.m, self.T = K, m, T
        self.encoder_q = base_encoder(num_classes=dim)
        self.encoder_k = base_encoder(num_classes=dim)
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data.copy_(param_q.data)
            param_k.requires_grad = False
        self.register_buffer("queue", F.normalize(torch.randn(dim, K), dim=0))
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data = param_k.data * self.m + param_q.data * (1.0 - self.m)

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        self.queue[:, ptr:ptr + batch_size] = keys.T
        self.queue_ptr[0] = (ptr + batch_size) % self.K

    def forward(self, im_q, im_k):
        q = F.normalize(self.encoder_q(im_q), dim=1)
        with torch.no_grad():
            self._momentum_update_key_encoder()
            k = F.normalize(self.encoder_k(im_k), dim=1)
        l_pos = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", [q, self.queue])
        logits = torch.cat([l_pos, l_neg], dim=1) / self.T
        labels = torch.zeros(logits.shape[0], dtype=torch.long)
        self._dequeue_and_enqueue(k)
        return logits, labels


def mlp_encoder(num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 32), nn.ReLU(), nn.Linear(32, num_classes))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = MoCo(mlp_encoder)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.03)
    im_q, im_k = torch.randn(4, 3, 8, 8), torch.randn(4, 3, 8, 8)
    output, target = model(im_q=im_q, im_k=im_k)
    loss = nn.CrossEntropyLoss()(output, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print("ok")
