# Thread: https://github.com/cross32768/Dreamer_PyTorch/issues/2
# Title: "Bug happened during the update of action model"
# Diagnosis from the thread: in Dreamer's behaviour learning, the lambda-returns of an imagined rollout are computed
# through the value model; the value model is updated (backward + value_optimizer.step()) before
# action_loss = -lambda_target_values.mean() is backpropagated, and that backward still needs the value model's
# weights ("[400, 1], which is output 0 of AsStridedBackward0, is at version 2; expected version 1"). Fix from the
# thread: change the order so the action model's backward/step runs before the value model's step.
# Kept from the thread: the RSSM-style transition (deterministic GRU state + stochastic state), the action model
# with a reparameterised tanh-Gaussian, the imagination rollout from detached posterior states, lambda_target(),
# the value loss against detached lambda targets, the clip_grad_norm_ calls, the update order. Added: sizes
# (hidden 40 instead of 400), a random starting state, one training iteration.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal
from torch.nn.utils import clip_grad_norm_

torch.manual_seed(0)

STATE_DIM, RNN_HIDDEN, ACTION_DIM, HIDDEN = 6, 12, 2, 40


class RecurrentStateSpaceModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc_state_action = nn.Linear(STATE_DIM + ACTION_DIM, RNN_HIDDEN)
        self.rnn = nn.GRUCell(RNN_HIDDEN, RNN_HIDDEN)
        self.fc_prior_mean = nn.Linear(RNN_HIDDEN, STATE_DIM)
        self.fc_prior_std = nn.Linear(RNN_HIDDEN, STATE_DIM)

    def prior(self, state, action, rnn_hidden):
        h = F.elu(self.fc_state_action(torch.cat([state, action], dim=1)))
        rnn_hidden = self.rnn(h, rnn_hidden)
        mean = self.fc_prior_mean(rnn_hidden)
        std = F.softplus(self.fc_prior_std(rnn_hidden)) + 0.1
        return Normal(mean, std), rnn_hidden


class RewardModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(STATE_DIM + RNN_HIDDEN, HIDDEN), nn.ELU(), nn.Linear(HIDDEN, 1))

    def forward(self, state, rnn_hidden):
        return self.fc(torch.cat([state, rnn_hidden], dim=1))


class ValueModel(RewardModel):
    pass


class ActionModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(STATE_DIM + RNN_HIDDEN, HIDDEN), nn.ELU())
        self.fc_mean = nn.Linear(HIDDEN, ACTION_DIM)
        self.fc_std = nn.Linear(HIDDEN, ACTION_DIM)

    def forward(self, state, rnn_hidden):
        h = self.fc(torch.cat([state, rnn_hidden], dim=1))
        mean = 5.0 * torch.tanh(self.fc_mean(h) / 5.0)
        std = F.softplus(self.fc_std(h)) + 1e-4
        return torch.tanh(Normal(mean, std).rsample())


def lambda_target(rewards, values, gamma, lambda_):
    V_lambda = torch.zeros_like(rewards)
    H = rewards.shape[0] - 1
    V_n = torch.zeros_like(rewards)
    V_n[H] = values[H]
    for n in range(1, H + 1):
        V_n[:-n] = (gamma ** n) * values[n:]
        for k in range(1, n + 1):
            if k == n:
                V_n[:-n] += (gamma ** (n - 1)) * rewards[k:]
            else:
                V_n[:-n] += (gamma ** (k - 1)) * rewards[k:-n + k]
        if n == H:
            V_lambda += (lambda_ ** (H - 1)) * V_n
        else:
            V_lambda += (1 - lambda_) * (lambda_ ** (n - 1)) * V_n
    return V_lambda


def train_behaviour(rssm, reward_model, value_model, action_model, value_optimizer, action_optimizer,
                    flatten_states, flatten_rnn_hiddens, horizon=4, gamma=0.9, lambda_=0.95, clip=100.0):
    imaginated_states = torch.zeros(horizon + 1, *flatten_states.shape)
    imaginated_rnn_hiddens = torch.zeros(horizon + 1, *flatten_rnn_hiddens.shape)
    imaginated_states[0] = flatten_states.detach()
    imaginated_rnn_hiddens[0] = flatten_rnn_hiddens.detach()
    for h in range(1, horizon + 1):
        actions = action_model(flatten_states, flatten_rnn_hiddens)
        prior, flatten_rnn_hiddens = rssm.prior(flatten_states, actions, flatten_rnn_hiddens)
        flatten_states = prior.rsample()
        imaginated_states[h] = flatten_states
        imaginated_rnn_hiddens[h] = flatten_rnn_hiddens

    flat_s = imaginated_states.view(-1, STATE_DIM)
    flat_h = imaginated_rnn_hiddens.view(-1, RNN_HIDDEN)
    imaginated_rewards = reward_model(flat_s, flat_h).view(horizon + 1, -1)
    imaginated_values = value_model(flat_s, flat_h).view(horizon + 1, -1)
    lambda_target_values = lambda_target(imaginated_rewards, imaginated_values, gamma, lambda_)

    value_loss = 0.5 * F.mse_loss(imaginated_values, lambda_target_values.detach())
    value_optimizer.zero_grad()
    value_loss.backward(retain_graph=True)
    clip_grad_norm_(value_model.parameters(), clip)
    value_optimizer.step()

    action_loss = -1 * (lambda_target_values.mean())
    action_optimizer.zero_grad()
    action_loss.backward()
    clip_grad_norm_(action_model.parameters(), clip)
    action_optimizer.step()
    return value_loss.item(), action_loss.item()


if __name__ == "__main__":
    rssm, reward_model, value_model, action_model = RecurrentStateSpaceModel(), RewardModel(), ValueModel(), ActionModel()
    value_optimizer = torch.optim.Adam(value_model.parameters(), lr=8e-5)
    action_optimizer = torch.optim.Adam(action_model.parameters(), lr=8e-5)
    states, rnn_hiddens = torch.randn(5, STATE_DIM), torch.randn(5, RNN_HIDDEN)
    print(train_behaviour(rssm, reward_model, value_model, action_model, value_optimizer, action_optimizer,
                          states, rnn_hiddens))
