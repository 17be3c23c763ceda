# Thread: https://github.com/reinforcement-learning-kr/lets-do-irl/issues/8
# Title: "Some questions or bugs?" (the crash itself is reported again in issue #12, "RunTimeError with vail")
# Diagnosis from the thread: in the VAIL trainer the Lagrange multiplier of the variational discriminator
# bottleneck is updated as beta = max(0, beta + alpha_beta * bottleneck_loss). bottleneck_loss is a tensor in the
# discriminator's graph, so beta stops being a number and becomes a tensor that carries that graph. The next
# inner update adds beta * bottleneck_loss to the VDB loss, and its backward (retain_graph=True) walks back into
# the previous update's graph, whose saved encoder weights vdb_optim.step() has since rewritten in place:
# "modified by an inplace operation" (issue #12: a [100, 4] weight, output 0 of AsStridedBackward0). The dual
# step must use the bottleneck's value, not its graph (bottleneck_loss.item() / detach()).
# Kept: the VDB module (encoder to mu / logvar, reparameterisation, sigmoid discriminator head), the KL helper,
# train_vdb(vdb, memory, vdb_optim, demonstrations, beta, args) with its inner loop of vdb_update_num updates,
# learner pairs labelled 1 and expert pairs 0, the loss BCE + BCE + beta * bottleneck_loss, backward with
# retain_graph=True, and the beta update after the step. Added: small sizes, a random memory and expert batch,
# an args namespace.
from types import SimpleNamespace

import torch
import torch.nn as nn

torch.manual_seed(0)


class VDB(nn.Module):
    def __init__(self, num_inputs, args):
        super().__init__()
        self.fc1 = nn.Linear(num_inputs, args.hidden_size)
        self.fc2 = nn.Linear(args.hidden_size, args.z_size)
        self.fc3 = nn.Linear(args.hidden_size, args.z_size)
        self.fc4 = nn.Linear(args.z_size, args.hidden_size)
        self.fc5 = nn.Linear(args.hidden_size, 1)

    def encoder(self, x):
        h = torch.tanh(self.fc1(x))
        return self.fc2(h), self.fc3(h)

    def reparameterize(self, mu, logvar):
        std = torch.exp(logvar / 2)
        return mu + std * torch.randn_like(std)

    def discriminator(self, z):
        return torch.sigmoid(self.fc5(torch.tanh(self.fc4(z))))

    def forward(self, x):
        mu, logvar = self.encoder(x)
        z = self.reparameterize(mu, logvar)
        return self.discriminator(z), mu, logvar


def kl_divergence(mu, logvar):
    return 0.5 * torch.sum(mu.pow(2) + logvar.exp() - logvar - 1, dim=1)


def train_vdb(vdb, memory, vdb_optim, demonstrations, beta, args):
    states = torch.stack([m[0] for m in memory])
    actions = torch.stack([m[1] for m in memory])
    criterion = nn.BCELoss()
    for _ in range(args.vdb_update_num):
        learner, l_mu, l_logvar = vdb(torch.cat([states, actions], dim=1))
        expert, e_mu, e_logvar = vdb(demonstrations)
        l_kld = kl_divergence(l_mu, l_logvar).mean()
        e_kld = kl_divergence(e_mu, e_logvar).mean()
        bottleneck_loss = 0.5 * (l_kld + e_kld) - args.i_c
        vdb_loss = (criterion(learner, torch.ones(states.shape[0], 1))
                    + criterion(expert, torch.zeros(demonstrations.shape[0], 1))
                    + beta * bottleneck_loss)
        vdb_optim.zero_grad()
        vdb_loss.backward(retain_graph=True)
        vdb_optim.step()
        beta = max(0, beta + args.alpha_beta * bottleneck_loss)
    expert_acc = ((vdb(demonstrations)[0] < 0.5).float()).mean()
    learner_acc = ((vdb(torch.cat([states, actions], dim=1))[0] > 0.5).float()).mean()
    return expert_acc, learner_acc


if __name__ == "__main__":
    args = SimpleNamespace(hidden_size=100, z_size=4, vdb_update_num=3, i_c=0.5, alpha_beta=1e-4,
                           learning_rate=3e-4, max_iter_num=200)
    state_dim, action_dim = 3, 1
    vdb = VDB(state_dim + action_dim, args)
    vdb_optim = torch.optim.Adam(vdb.parameters(), lr=args.learning_rate)
    demonstrations = torch.randn(50, state_dim + action_dim) + 1.0
    for iteration in range(args.max_iter_num):
        memory = [(torch.randn(state_dim), torch.randn(action_dim), 0.0, 1.0) for _ in range(50)]
        expert_acc, learner_acc = train_vdb(vdb, memory, vdb_optim, demonstrations, 0, args)
    print(iteration, expert_acc.item(), learner_acc.item())
