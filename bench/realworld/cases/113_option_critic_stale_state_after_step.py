# Thread: https://github.com/lweitkamp/option-critic-pytorch/issues/9
# Title: "loss.backward error"
# Diagnosis from the thread: with newer torch the option-critic training loop fails at loss.backward() with
# "[32, 64], which is output 0 of AsStrideBackward0, is at version 2; expected version 1". The maintainer found it
# was "how I access the state variable": the loop keeps `state = get_state(next_obs)` from the previous step,
# computed through the shared feature network before that step's optim.step(), and the next step's get_action(state)
# log-prob and entropy (used in the actor loss) backpropagate through those already-updated feature weights. The
# fix recomputes the state features after the update.
# Kept from the thread: OptionCriticFeatures (shared features, Q over options, terminations, per-option softmax
# policies from options_W/options_b), get_state / get_action / predict_option_termination, actor_loss_fn and
# critic_loss_fn, the episode loop that adds the critic loss every update_frequency steps and steps one optimiser,
# the prime (target) network. Added: a fake 4-dim environment, a tiny replay list, sizes, a 3-step episode.
import random
from copy import deepcopy
from types import SimpleNamespace

import torch
import torch.nn as nn
from torch.distributions import Bernoulli, Categorical

torch.manual_seed(0)
random.seed(0)


class OptionCriticFeatures(nn.Module):
    def __init__(self, in_features, num_actions, num_options, temperature=1.0):
        super().__init__()
        self.num_options, self.temperature = num_options, temperature
        self.features = nn.Sequential(nn.Linear(in_features, 32), nn.ReLU(), nn.Linear(32, 64), nn.ReLU())
        self.Q = nn.Linear(64, num_options)
        self.terminations = nn.Linear(64, num_options)
        self.options_W = nn.Parameter(torch.zeros(num_options, 64, num_actions))
        self.options_b = nn.Parameter(torch.zeros(num_options, num_actions))

    def get_state(self, obs):
        if obs.ndim < 2:
            obs = obs.unsqueeze(0)
        return self.features(obs)

    def get_Q(self, state):
        return self.Q(state)

    def get_terminations(self, state):
        return self.terminations(state).sigmoid()

    def predict_option_termination(self, state, current_option):
        termination = self.get_terminations(state)[:, current_option].sigmoid()
        option_termination = Bernoulli(termination).sample()
        next_option = self.get_Q(state).argmax(dim=-1)
        return bool(option_termination.item()), next_option.item()

    def get_action(self, state, option):
        logits = state @ self.options_W[option] + self.options_b[option]
        action_dist = Categorical((logits / self.temperature).softmax(dim=-1))
        action = action_dist.sample()
        return action.item(), action_dist.log_prob(action), action_dist.entropy()


def critic_loss_fn(model, model_prime, data_batch, args):
    obs, options, rewards, next_obs, dones = data_batch
    batch_idx = torch.arange(len(options))
    states = model.get_state(obs)
    Q = model.get_Q(states)
    next_states_prime = model_prime.get_state(next_obs)
    next_Q_prime = model_prime.get_Q(next_states_prime)
    next_states = model.get_state(next_obs)
    next_termination_probs = model.get_terminations(next_states).detach()
    next_options_term_prob = next_termination_probs[batch_idx, options]
    gt = rewards + (1 - dones) * args.gamma * (
        (1 - next_options_term_prob) * next_Q_prime[batch_idx, options]
        + next_options_term_prob * next_Q_prime.max(dim=-1)[0])
    return (Q[batch_idx, options] - gt.detach()).pow(2).mul(0.5).mean()


def actor_loss_fn(obs, option, logp, entropy, reward, done, next_obs, model, model_prime, args):
    state = model.get_state(obs)
    next_state = model.get_state(next_obs)
    next_state_prime = model_prime.get_state(next_obs)
    option_term_prob = model.get_terminations(state)[:, option]
    next_option_term_prob = model.get_terminations(next_state)[:, option].detach()
    Q = model.get_Q(state).detach().squeeze()
    next_Q_prime = model_prime.get_Q(next_state_prime).detach().squeeze()
    gt = reward + (1 - done) * args.gamma * (
        (1 - next_option_term_prob) * next_Q_prime[option] + next_option_term_prob * next_Q_prime.max(dim=-1)[0])
    termination_loss = option_term_prob * (Q[option].detach() - Q.max(dim=-1)[0].detach()
                                           + args.termination_reg) * (1 - done)
    policy_loss = -logp * (gt.detach() - Q[option]) - args.entropy_reg * entropy
    return (termination_loss + policy_loss).sum()


def run(args, steps_total=3):
    option_critic = OptionCriticFeatures(4, 2, args.num_options)
    option_critic_prime = deepcopy(option_critic)
    optim = torch.optim.RMSprop(option_critic.parameters(), lr=args.learning_rate)
    buffer = [(torch.randn(4), random.randrange(args.num_options), 1.0, torch.randn(4), 0.0) for _ in range(8)]

    obs = torch.randn(4)
    state = option_critic.get_state(obs)
    greedy_option = option_critic.get_Q(state).argmax(dim=-1).item()
    current_option, option_termination, steps = 0, True, 0
    while steps < steps_total:
        if option_termination:
            current_option = greedy_option
        action, logp, entropy = option_critic.get_action(state, current_option)
        next_obs, reward, done = torch.randn(4), 1.0, 0.0
        buffer.append((obs, current_option, reward, next_obs, done))

        state = option_critic.get_state(next_obs)
        option_termination, greedy_option = option_critic.predict_option_termination(state, current_option)

        loss = actor_loss_fn(obs, current_option, logp, entropy, reward, done, next_obs, option_critic,
                             option_critic_prime, args)
        if steps % args.update_frequency == 0:
            sample = random.sample(buffer, args.batch_size)
            data_batch = (torch.stack([s[0] for s in sample]), torch.tensor([s[1] for s in sample]),
                          torch.tensor([s[2] for s in sample]), torch.stack([s[3] for s in sample]),
                          torch.tensor([s[4] for s in sample]))
            loss = loss + critic_loss_fn(option_critic, option_critic_prime, data_batch, args)
        optim.zero_grad()
        loss.backward()
        optim.step()
        steps += 1
        obs = next_obs
        print(f"step {steps}: loss {loss.item():.4f}")


if __name__ == "__main__":
    run(SimpleNamespace(num_options=2, learning_rate=1e-3, gamma=0.99, termination_reg=0.01, entropy_reg=0.01,
                        update_frequency=2, batch_size=4))
