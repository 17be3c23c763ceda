# Thread: https://github.com/TonghanWang/NDQ/issues/15
# Title: "Encounter a strange issue"
# What the thread shows: NDQ's categorical (communication) Q-learner fails at loss.backward() with "[32, 16, 2, 3],
# which is output 0 of SliceBackward, is at version 1; expected version 0", and the reporter suspects the torch
# version. In the learner the thread's traceback points to (src/learners/categorical_q_learner.py), the chosen-action
# Q-values are gathered from mac_out[:, :-1], and the double-Q branch then masks unavailable actions with
# `mac_out[avail_actions == 0] = -9999999` on mac_out itself; gather saved that slice, and newer torch checks it. The
# upstream pymarl learner does this masking on a detached clone (mac_out_detach).
# Kept from the learner: the per-timestep MAC rollout returning Q-values plus the message distribution (mu, sigma),
# message logits and sampled messages; gather of the chosen actions; the target MAC with label targets and masked
# max; the double-Q argmax on the masked mac_out; the mixer; the information-bottleneck message losses
# (expressiveness, compactness KL to a prior, entropy); one RMSprop step. Added: a tiny MAC, a VDN-style mixer, a
# random episode batch, SimpleNamespace args.
import copy
from types import SimpleNamespace

import torch as th
import torch.distributions as D
import torch.nn as nn
import torch.nn.functional as F

th.manual_seed(0)


class CommMAC(nn.Module):
    """Agents encode a message (Gaussian), read the others' messages and output Q-values and message logits."""

    def __init__(self, args):
        super().__init__()
        self.args = args
        self.fc = nn.Linear(args.obs_shape, args.hidden)
        self.rnn = nn.GRUCell(args.hidden, args.hidden)
        self.msg = nn.Linear(args.hidden, 2 * args.msg_dim)
        self.q = nn.Linear(args.hidden + args.msg_dim, args.n_actions)
        self.msg_logits = nn.Linear(args.msg_dim, args.n_actions)
        self.hidden = None

    def init_hidden(self, batch_size):
        self.hidden = th.zeros(batch_size * self.args.n_agents, self.args.hidden)

    def forward(self, batch, t):
        bs, n = batch["obs"].shape[0], self.args.n_agents
        self.hidden = self.rnn(F.relu(self.fc(batch["obs"][:, t].reshape(bs * n, -1))), self.hidden)
        mu, log_sigma = self.msg(self.hidden).chunk(2, dim=-1)
        sigma = F.softplus(log_sigma) + 1e-3
        m_sample = mu + sigma * th.randn_like(mu)
        incoming = m_sample.view(bs, n, -1).mean(dim=1, keepdim=True).expand(bs, n, -1).reshape(bs * n, -1)
        q = self.q(th.cat([self.hidden, incoming], dim=-1)).view(bs, n, -1)
        logits = F.softmax(self.msg_logits(m_sample), dim=-1).view(bs, n, -1)
        return q, (mu.view(bs, n, -1), sigma.view(bs, n, -1)), logits, m_sample.view(bs, n, -1)


class VDNMixer(nn.Module):
    def forward(self, agent_qs, states):
        return agent_qs.sum(dim=2, keepdim=True)


class CateQLearner:
    def __init__(self, mac, args):
        self.args, self.mac = args, mac
        self.mixer, self.target_mixer = VDNMixer(), VDNMixer()
        self.params = list(mac.parameters())
        self.optimiser = th.optim.RMSprop(self.params, lr=5e-4, alpha=0.99, eps=1e-5)
        self.target_mac = copy.deepcopy(mac)
        self.s_mu, self.s_sigma = th.zeros(1), th.ones(1)

    def train(self, batch):
        rewards = batch["reward"][:, :-1]
        actions = batch["actions"][:, :-1]
        terminated = batch["terminated"][:, :-1].float()
        mask = batch["filled"][:, :-1].float()
        mask[:, 1:] = mask[:, 1:] * (1 - terminated[:, :-1])
        avail_actions = batch["avail_actions"]
        T = batch["obs"].shape[1]

        mac_out, mu_out, sigma_out, logits_out, m_sample_out = [], [], [], [], []
        self.mac.init_hidden(batch["obs"].shape[0])
        for t in range(T):
            agent_outs, (mu, sigma), logits, m_sample = self.mac.forward(batch, t=t)
            mu_out.append(mu)
            sigma_out.append(sigma)
            logits_out.append(logits)
            m_sample_out.append(m_sample)
            mac_out.append(agent_outs)
        mac_out = th.stack(mac_out, dim=1)
        mu_out, sigma_out = th.stack(mu_out, dim=1)[:, :-1], th.stack(sigma_out, dim=1)[:, :-1]
        logits_out, m_sample_out = th.stack(logits_out, dim=1)[:, :-1], th.stack(m_sample_out, dim=1)[:, :-1]

        chosen_action_qvals = th.gather(mac_out[:, :-1], dim=3, index=actions).squeeze(3)

        target_mac_out = []
        self.target_mac.init_hidden(batch["obs"].shape[0])
        with th.no_grad():
            for t in range(T):
                target_mac_out.append(self.target_mac.forward(batch, t=t)[0])
        label_target_max_out = th.stack(target_mac_out[:-1], dim=1)
        label_target_max_out[avail_actions[:, :-1] == 0] = -9999999
        label_target_actions = label_target_max_out.max(dim=3, keepdim=True)[1]
        target_mac_out = th.stack(target_mac_out[1:], dim=1)
        target_mac_out[avail_actions[:, 1:] == 0] = -9999999

        if self.args.double_q:
            mac_out[avail_actions == 0] = -9999999
            cur_max_actions = mac_out[:, 1:].max(dim=3, keepdim=True)[1]
            target_max_qvals = th.gather(target_mac_out, 3, cur_max_actions).squeeze(3)
        else:
            target_max_qvals = target_mac_out.max(dim=3)[0]

        chosen_action_qvals = self.mixer(chosen_action_qvals, batch["state"][:, :-1])
        target_max_qvals = self.target_mixer(target_max_qvals, batch["state"][:, 1:])
        targets = rewards + self.args.gamma * (1 - terminated) * target_max_qvals
        td_error = chosen_action_qvals - targets.detach()
        mask = mask.expand_as(td_error)
        loss = ((td_error * mask) ** 2).sum() / mask.sum()

        label_prob = th.gather(logits_out, 3, label_target_actions).squeeze(3)
        expressiveness_loss = (-th.log(label_prob + 1e-6)).sum() / mask.sum()
        compactness_loss = D.kl_divergence(D.Normal(mu_out, sigma_out), D.Normal(self.s_mu, self.s_sigma)).sum() / mask.sum()
        entropy_loss = -D.Normal(self.s_mu, self.s_sigma).log_prob(m_sample_out).sum() / mask.sum()
        loss = loss + self.args.c_beta * (expressiveness_loss + self.args.comm_beta * compactness_loss
                                          + self.args.comm_entropy_beta * entropy_loss)

        self.optimiser.zero_grad()
        loss.backward()
        th.nn.utils.clip_grad_norm_(self.params, 10)
        self.optimiser.step()
        return loss.item()


if __name__ == "__main__":
    args = SimpleNamespace(n_agents=2, n_actions=3, obs_shape=5, hidden=8, msg_dim=2, gamma=0.99, double_q=True,
                           c_beta=0.1, comm_beta=0.01, comm_entropy_beta=0.001)
    bs, T = 2, 4
    avail = (th.rand(bs, T, args.n_agents, args.n_actions) < 0.7).long()
    avail[..., 0] = 1
    batch = {"obs": th.randn(bs, T, args.n_agents, args.obs_shape), "state": th.randn(bs, T, 6),
             "actions": th.zeros(bs, T, args.n_agents, 1, dtype=th.long), "reward": th.randn(bs, T, 1),
             "terminated": th.zeros(bs, T, 1), "filled": th.ones(bs, T, 1), "avail_actions": avail}
    print(CateQLearner(CommMAC(args), args).train(batch))
