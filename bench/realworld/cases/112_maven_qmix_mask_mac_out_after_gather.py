# Thread: https://github.com/AnujMahajanOxf/MAVEN/issues/3
# Title: "Gradient error on noisemix"
# Diagnosis from the thread: MAVEN's noise Q-learner (a pymarl QMIX learner) gathers the chosen actions' Q-values
# from mac_out[:, :-1], then masks unavailable actions with `mac_out[avail_actions == 0] = -9999999` directly on
# mac_out (for the double-Q argmax and again before the discriminator's softmax); gather saved mac_out's slice for
# backward, so loss.backward() fails with "[32, 56, 3, 9], which is output 0 of SliceBackward, is at version 2;
# expected version 0". The upstream pymarl learner masks a detached clone (mac_out_detach) instead.
# Kept from the thread: the learner's train() (per-timestep MAC rollout stacked over time, gather of chosen
# actions, target MAC with masked max, double-Q argmax, the noise-conditioned mixer, the discriminator over
# softmaxed Q-values and states, one RMSprop over all parameters). Added: a tiny RNN agent and mixer, a random
# episode batch as a dict, SimpleNamespace args, one training call.
import copy
from types import SimpleNamespace

import torch as th
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import RMSprop

th.manual_seed(0)


class RNNAgent(nn.Module):
    def __init__(self, input_shape, args):
        super().__init__()
        self.fc1 = nn.Linear(input_shape, args.rnn_hidden_dim)
        self.rnn = nn.GRUCell(args.rnn_hidden_dim, args.rnn_hidden_dim)
        self.fc2 = nn.Linear(args.rnn_hidden_dim, args.n_actions)

    def forward(self, inputs, hidden):
        h = self.rnn(F.relu(self.fc1(inputs)), hidden)
        return self.fc2(h), h


class BasicMAC:
    def __init__(self, args):
        self.args = args
        self.agent = RNNAgent(args.obs_shape, args)
        self.hidden_states = None

    def init_hidden(self, batch_size):
        self.hidden_states = th.zeros(batch_size * self.args.n_agents, self.args.rnn_hidden_dim)

    def forward(self, batch, t):
        bs = batch["obs"].shape[0]
        inputs = batch["obs"][:, t].reshape(bs * self.args.n_agents, -1)
        agent_outs, self.hidden_states = self.agent(inputs, self.hidden_states)
        return agent_outs.view(bs, self.args.n_agents, -1)

    def parameters(self):
        return self.agent.parameters()


class NoiseQMixer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        in_dim = args.state_shape + args.noise_dim
        self.hyper_w_1 = nn.Linear(in_dim, args.mixing_embed_dim * args.n_agents)
        self.hyper_w_final = nn.Linear(in_dim, args.mixing_embed_dim)
        self.hyper_b_1 = nn.Linear(in_dim, args.mixing_embed_dim)
        self.V = nn.Linear(in_dim, 1)

    def forward(self, agent_qs, states, noise):
        bs, T = agent_qs.shape[:2]
        x = th.cat([states, noise], dim=-1).reshape(bs * T, -1)
        qs = agent_qs.reshape(bs * T, 1, self.args.n_agents)
        w1 = th.abs(self.hyper_w_1(x)).view(-1, self.args.n_agents, self.args.mixing_embed_dim)
        hidden = F.elu(th.bmm(qs, w1) + self.hyper_b_1(x).view(-1, 1, self.args.mixing_embed_dim))
        w_final = th.abs(self.hyper_w_final(x)).view(-1, self.args.mixing_embed_dim, 1)
        return (th.bmm(hidden, w_final) + self.V(x).view(-1, 1, 1)).view(bs, T, 1)


class NoiseQLearner:
    def __init__(self, mac, args):
        self.args, self.mac = args, mac
        self.params = list(mac.parameters())
        self.mixer = NoiseQMixer(args)
        self.params += list(self.mixer.parameters())
        self.target_mixer = copy.deepcopy(self.mixer)
        discrim_input = args.state_shape + args.n_agents * args.n_actions
        self.discrim = nn.Sequential(nn.Linear(discrim_input, 16), nn.ReLU(), nn.Linear(16, args.noise_dim))
        self.params += list(self.discrim.parameters())
        self.discrim_loss = nn.CrossEntropyLoss(reduction="none")
        self.optimiser = RMSprop(params=self.params, lr=5e-4, alpha=0.99, eps=1e-5)
        self.target_mac = copy.deepcopy(mac)

    def train(self, batch):
        rewards = batch["reward"][:, :-1]
        actions = batch["actions"][:, :-1]
        terminated = batch["terminated"][:, :-1].float()
        mask = batch["filled"][:, :-1].float()
        mask[:, 1:] = mask[:, 1:] * (1 - terminated[:, :-1])
        avail_actions = batch["avail_actions"]
        noise = batch["noise"][:, 0].unsqueeze(1).repeat(1, rewards.shape[1], 1)
        T = batch["obs"].shape[1]

        mac_out = []
        self.mac.init_hidden(batch["obs"].shape[0])
        for t in range(T):
            mac_out.append(self.mac.forward(batch, t=t))
        mac_out = th.stack(mac_out, dim=1)
        chosen_action_qvals = th.gather(mac_out[:, :-1], dim=3, index=actions).squeeze(3)

        target_mac_out = []
        self.target_mac.init_hidden(batch["obs"].shape[0])
        for t in range(T):
            target_mac_out.append(self.target_mac.forward(batch, t=t))
        target_mac_out = th.stack(target_mac_out[1:], dim=1).detach()
        target_mac_out[avail_actions[:, 1:] == 0] = -9999999

        if self.args.double_q:
            mac_out[avail_actions == 0] = -9999999
            cur_max_actions = mac_out[:, 1:].max(dim=3, keepdim=True)[1]
            target_max_qvals = th.gather(target_mac_out, 3, cur_max_actions).squeeze(3)
        else:
            target_max_qvals = target_mac_out.max(dim=3)[0]

        chosen_action_qvals = self.mixer(chosen_action_qvals, batch["state"][:, :-1], noise)
        target_max_qvals = self.target_mixer(target_max_qvals, batch["state"][:, 1:], noise)

        mac_out[avail_actions == 0] = -9999999
        q_softmax_actions = F.softmax(mac_out[:, :-1], dim=3)
        q_softmax_agents = q_softmax_actions.reshape(q_softmax_actions.shape[0], q_softmax_actions.shape[1], -1)
        state_and_softactions = th.cat([q_softmax_agents, batch["state"][:, :-1]], dim=2)
        discrim_prediction = self.discrim(state_and_softactions.reshape(-1, state_and_softactions.shape[-1]))
        discrim_target = batch["noise"][:, 0].long().max(dim=1)[1].unsqueeze(1).repeat(1, rewards.shape[1]).reshape(-1)
        discrim_loss = self.discrim_loss(discrim_prediction, discrim_target)
        averaged_discrim_loss = (discrim_loss * mask.reshape(-1)).sum() / mask.sum()

        targets = rewards + self.args.gamma * (1 - terminated) * target_max_qvals
        td_error = chosen_action_qvals - targets.detach()
        mask = mask.expand_as(td_error)
        loss = ((td_error * mask) ** 2).sum() / mask.sum() + self.args.mi_loss * averaged_discrim_loss

        self.optimiser.zero_grad()
        loss.backward()
        th.nn.utils.clip_grad_norm_(self.params, 10)
        self.optimiser.step()
        return loss.item()


def random_batch(args, bs=2, T=5):
    avail = (th.rand(bs, T, args.n_agents, args.n_actions) < 0.7).long()
    avail[..., 0] = 1
    noise = th.zeros(bs, T, args.noise_dim)
    noise[:, :, 1] = 1
    return {
        "obs": th.randn(bs, T, args.n_agents, args.obs_shape),
        "state": th.randn(bs, T, args.state_shape),
        "actions": th.zeros(bs, T, args.n_agents, 1, dtype=th.long),
        "reward": th.randn(bs, T, 1),
        "terminated": th.zeros(bs, T, 1),
        "filled": th.ones(bs, T, 1),
        "avail_actions": avail,
        "noise": noise,
    }


if __name__ == "__main__":
    args = SimpleNamespace(n_agents=3, n_actions=4, obs_shape=6, state_shape=8, rnn_hidden_dim=8, noise_dim=2,
                           mixing_embed_dim=8, gamma=0.99, double_q=True, mi_loss=0.001)
    learner = NoiseQLearner(BasicMAC(args), args)
    print(learner.train(random_batch(args)))
