# Source: https://github.com/facebookresearch/fairseq/issues/251
# Title: "Problem About Changing the encoder_out"
# Diagnosis from the thread: during decoding the user rewrites one channel of the encoder output in place,
# `encoder_out[0][:, :, j] = do_something(encoder_out[0][:, :, j])`; encoder_out already took part in the
# attention of earlier steps, which saved it for backward, so backward fails. The maintainer's answer: copy the
# variable and modify the copy. Kept from the thread: a conv encoder returning (encoder_out, encoder_out_combined)
# as fairseq's fconv does, a step-by-step decoder attending over encoder_out, the per-step in-place column
# rewrite. Added: tiny sizes, do_something (a learned gate on the column), teacher-forced targets.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvEncoder(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.conv = nn.Conv1d(dim, 2 * dim, 3, padding=1)

    def forward(self, src_tokens):
        x = self.embed(src_tokens)
        y = F.glu(self.conv(x.transpose(1, 2)), dim=1).transpose(1, 2)
        return y, y + x  # (encoder_out, encoder_out_combined) as in fconv


class StepDecoder(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.cell = nn.GRUCell(2 * dim, dim)
        self.gate = nn.Linear(1, 1)
        self.out = nn.Linear(dim, vocab)

    def do_something(self, column):
        return column * torch.sigmoid(self.gate(column.unsqueeze(-1))).squeeze(-1)

    def forward(self, prev_tokens, encoder_out):
        bsz, tgt_len = prev_tokens.shape
        h = prev_tokens.new_zeros(bsz, self.cell.hidden_size, dtype=torch.float)
        logits = []
        for j in range(tgt_len):
            scores = torch.bmm(encoder_out[0], h.unsqueeze(2)).squeeze(2)
            attn = F.softmax(scores, dim=1)
            ctx = torch.bmm(attn.unsqueeze(1), encoder_out[1]).squeeze(1)
            h = self.cell(torch.cat([self.embed(prev_tokens[:, j]), ctx], dim=1), h)
            logits.append(self.out(h))
            encoder_out[0][:, :, j] = self.do_something(encoder_out[0][:, :, j])
        return torch.stack(logits, dim=1)


if __name__ == "__main__":
    torch.manual_seed(0)
    enc, dec = ConvEncoder(12, 6), StepDecoder(12, 6)
    src = torch.randint(1, 12, (2, 5))
    tgt = torch.randint(1, 12, (2, 4))
    encoder_out = list(enc(src))
    logits = dec(tgt, encoder_out)
    F.cross_entropy(logits.reshape(-1, 12), tgt.reshape(-1)).backward()
    print("ok")
