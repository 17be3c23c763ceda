"""espnet 202511, espnet/nets/pytorch_backend/rnn/attentions.py:1824 and :1826 (gradguard GG001, errors): real, latent.

`GDCAttLoc.forward(..., att_prev, last_attended_idx=...)` runs the location conv on `att_prev`
(Conv2d saves its input for the weight gradient) and then calls `_apply_dynamic_filter(att_prev, ...)`,
which zeroes `p[:, :backward_idx]` and `p[:, forward_idx:]` in place.  `att_prev` is the previous step's
returned attention `w`, which that step also saved (`self.enc_h * w.view(...)`).  So backward through
the decoder steps raises.  Latent: espnet passes `last_attended_idx` only at inference (Tacotron2
decoder with the attention constraint, decoder.py:543-606), where nothing backpropagates.
The fix is `p = p.clone()` at the top of `_apply_dynamic_filter`.

espnet's module imports the rest of espnet, so `_apply_dynamic_filter` and `GDCAttLoc` are copied
faithfully from attentions.py:1798-1973 (`make_pad_mask`/`to_device` replaced by a two-line mask).

    python bench/repro/espnet_gdca_dynamic_filter.py     # exits 0 when the bug reproduces
"""

import torch
import torch.nn.functional as F


def _apply_dynamic_filter(p, last_attended_idx, backward_window=1, forward_window=3, clone=False):  # :1798
    if clone:  # the fix
        p = p.clone()
    if p.size(0) != 1:
        raise NotImplementedError("Batch dynamic filter is not yet supported.")
    backward_idx = last_attended_idx - backward_window
    forward_idx = last_attended_idx + forward_window
    if backward_idx > 0:
        p[:, :backward_idx] = 0  # line 1824
    if forward_idx < p.size(1):
        p[:, forward_idx:] = 0  # line 1826
    return p


class GDCAttLoc(torch.nn.Module):  # attentions.py:1830
    def __init__(self, eprojs, dunits, att_dim, aconv_chans, aconv_filts, han_mode=False, clone=False):
        super().__init__()
        self.pt_zero_linear = torch.nn.Linear(att_dim, 1)
        self.mlp_enc = torch.nn.Linear(eprojs, att_dim)
        self.mlp_dec = torch.nn.Linear(dunits, att_dim, bias=False)
        self.mlp_att = torch.nn.Linear(aconv_chans, att_dim, bias=False)
        self.loc_conv = torch.nn.Conv2d(1, aconv_chans, (1, 2 * aconv_filts + 1), padding=(0, aconv_filts), bias=False)
        self.gvec = torch.nn.Linear(att_dim, 1)
        self.dunits = dunits
        self.eprojs = eprojs
        self.att_dim = att_dim
        self.h_length = None
        self.enc_h = None
        self.pre_compute_enc_h = None
        self.mask = None
        self.han_mode = han_mode
        self.clone = clone

    def forward(self, enc_hs_pad, enc_hs_len, trans_token, dec_z, att_prev, scaling=1.0, last_attended_idx=None,
                backward_window=1, forward_window=3):
        batch = len(enc_hs_pad)
        if self.pre_compute_enc_h is None or self.han_mode:
            self.enc_h = enc_hs_pad
            self.h_length = self.enc_h.size(1)
            self.pre_compute_enc_h = self.mlp_enc(self.enc_h)
        if dec_z is None:
            dec_z = enc_hs_pad.new_zeros(batch, self.dunits)
        else:
            dec_z = dec_z.view(batch, self.dunits)
        if att_prev is None:
            att_prev = enc_hs_pad.new_zeros(*enc_hs_pad.size()[:2])
            att_prev[:, 0] = 1.0
        att_conv = self.loc_conv(att_prev.view(batch, 1, 1, self.h_length))
        att_conv = att_conv.squeeze(2).transpose(1, 2)
        att_conv = self.mlp_att(att_conv)
        dec_z_tiled = self.mlp_dec(dec_z).view(batch, 1, self.att_dim)
        e = self.gvec(torch.tanh(att_conv + self.pre_compute_enc_h + dec_z_tiled)).squeeze(2)
        if self.mask is None:  # make_pad_mask(enc_hs_len), moved to enc_hs_pad's device
            self.mask = torch.arange(self.h_length)[None, :] >= torch.tensor(enc_hs_len)[:, None]
        e.masked_fill_(self.mask, -float("inf"))
        w = F.softmax(scaling * e, dim=1)
        if last_attended_idx is not None:
            att_prev = _apply_dynamic_filter(att_prev, last_attended_idx, backward_window, forward_window,
                                             clone=self.clone)
        att_prev_shift = F.pad(att_prev, (1, 0))[:, :-1]
        trans_token = trans_token.squeeze(-1)
        trans_token_shift = F.pad(trans_token, (1, 0))[:, :-1]
        w = ((1 - trans_token_shift) * att_prev_shift + trans_token * att_prev) * w
        w = F.normalize(torch.clamp(w, 1e-6), p=1, dim=1)
        c = torch.sum(self.enc_h * w.view(batch, self.h_length, 1), dim=1)
        return c, w


def decode(att, last_attended_idx):
    torch.manual_seed(0)
    enc = torch.randn(1, 10, 6, requires_grad=True)  # (B=1, T=10, eprojs=6)
    trans = torch.sigmoid(torch.randn(1, 10, 1))
    loss, w = 0, None
    for step in range(3):
        c, w = att(enc, [10], trans, None, w, last_attended_idx=last_attended_idx)
        loss = loss + c.sum()
    return loss


torch.manual_seed(0)
att = GDCAttLoc(eprojs=6, dunits=4, att_dim=5, aconv_chans=3, aconv_filts=2)
decode(att, None).backward()
print("last_attended_idx=None (training): backward ok")
with torch.no_grad():
    decode(GDCAttLoc(6, 4, 5, 3, 2), 4)
print("last_attended_idx=4 under no_grad (espnet's inference): ok")
decode(GDCAttLoc(6, 4, 5, 3, 2, clone=True), 4).backward()
print("last_attended_idx=4 with p.clone() in the filter: backward ok (the fix)")
try:
    decode(GDCAttLoc(6, 4, 5, 3, 2), 4).backward()
except RuntimeError as e:
    assert "modified by an inplace operation" in str(e), e
    print("last_attended_idx=4, espnet's filter: backward raises:", str(e).splitlines()[0][:170])
    raise SystemExit(0)
raise SystemExit("did not reproduce")
