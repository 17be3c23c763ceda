# Thread: https://github.com/maximilianigl/DVRL/issues/5
# Title: "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace
# operation"
# Diagnosis from the thread: the recurrent A2C trainer (main.py) keeps the agent's latent state in
# current_memory['states'] across gradient updates and only detaches it every multiplier_backprop_length updates
# (retain_graph = j % multiplier_backprop_length != 0), while optimizer.step() runs after every update. The next
# update's loss therefore backpropagates through the previous rollout's graph, whose saved weights the last
# optimizer.step() rewrote in place: with torch >= 0.4.1 this raises "modified by an inplace operation". The
# maintainer's answer: set multiplier_backprop_length=1 (the state is then detached after every update; raise
# num_steps instead to keep a long backprop horizon) - the reporter confirms it removes the error.
# Kept: an RNN policy fed with the current observation, the one-hot previous action and the reward, a
# current_memory dict (current_obs, states, oneHotActions, rewards), run_model() stepping vectorised
# environments and resetting the latent state through the done masks, RolloutStorage.compute_returns /
# after_update, the n-step A2C loss (value, action, entropy), RMSprop, and the retain_graph / conditional detach
# logic of the main loop. Added: a small vectorised 1-D "mountain hike" environment, small sizes, a config dict.
import collections

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

torch.manual_seed(0)
np.random.seed(0)

PolicyReturn = collections.namedtuple(
    "PolicyReturn", ["latent_state", "value_estimate", "action", "action_log_probs", "dist_entropy"])


class VecHike:
    """num_processes copies of a 1-D walk towards a goal, with noisy position observations."""

    def __init__(self, num_processes, n_actions=3):
        self.num_processes, self.n_actions = num_processes, n_actions
        self.pos = np.zeros(num_processes, dtype=np.float32)
        self.t = np.zeros(num_processes, dtype=np.int64)

    def reset(self):
        self.pos[:], self.t[:] = np.random.uniform(-1, 1, self.num_processes), 0
        return self._obs()

    def _obs(self):
        return (self.pos[:, None] + 0.1 * np.random.randn(self.num_processes, 2)).astype(np.float32)

    def step(self, actions):
        self.pos += 0.1 * (actions.astype(np.float32) - 1)
        self.t += 1
        reward = -np.abs(self.pos - 0.5)
        done = self.t >= 8
        self.pos[done], self.t[done] = np.random.uniform(-1, 1, int(done.sum())), 0
        return self._obs(), reward, done, [{} for _ in range(self.num_processes)]


class RNNPolicy(nn.Module):
    def __init__(self, n_actions, nr_inputs, h_dim=32):
        super().__init__()
        self.n_actions, self.h_dim = n_actions, h_dim
        self.obs_encoder = nn.Sequential(nn.Linear(nr_inputs, h_dim), nn.ReLU())
        self.rnn = nn.GRUCell(h_dim + n_actions + 1, h_dim)
        self.actor = nn.Linear(h_dim, n_actions)
        self.critic = nn.Linear(h_dim, 1)

    def new_latent_state(self, num_processes):
        return torch.zeros(num_processes, self.h_dim)

    def vec_conditional_new_latent_state(self, latent_state, masks):
        return latent_state * masks

    def forward(self, current_memory):
        x = torch.cat([self.obs_encoder(current_memory["current_obs"]), current_memory["oneHotActions"],
                       current_memory["rewards"]], dim=1)
        latent_state = self.rnn(x, current_memory["states"])
        dist = Categorical(logits=self.actor(latent_state))
        action = dist.sample()
        return PolicyReturn(latent_state, self.critic(latent_state), action.unsqueeze(1),
                            dist.log_prob(action).unsqueeze(1), dist.entropy().mean())


class RolloutStorage:
    def __init__(self, num_steps, num_processes):
        self.rewards = torch.zeros(num_steps, num_processes, 1)
        self.masks = torch.ones(num_steps + 1, num_processes, 1)
        self.returns = torch.zeros(num_steps + 1, num_processes, 1)
        self.num_steps = num_steps

    def insert(self, step, reward, mask):
        self.rewards[step].copy_(reward)
        self.masks[step + 1].copy_(mask)

    def after_update(self):
        self.masks[0].copy_(self.masks[-1])

    def compute_returns(self, next_value, gamma):
        self.returns[-1] = next_value
        for step in reversed(range(self.num_steps)):
            self.returns[step] = self.returns[step + 1] * gamma * self.masks[step + 1] + self.rewards[step]


def run_model(actor_critic, current_memory, envs):
    policy_return = actor_critic(current_memory=current_memory)
    cpu_actions = policy_return.action.detach().squeeze(1).cpu().numpy()
    obs, reward, done, info = envs.step(cpu_actions)
    reward = torch.from_numpy(np.expand_dims(np.stack(reward), 1)).float()
    masks = torch.FloatTensor([[0.0] if done_ else [1.0] for done_ in done])
    current_memory["current_obs"] = torch.from_numpy(obs).float()
    current_memory["states"] = actor_critic.vec_conditional_new_latent_state(policy_return.latent_state, masks)
    current_memory["oneHotActions"] = F.one_hot(policy_return.action.squeeze(1) * masks.long().squeeze(1),
                                                actor_critic.n_actions).float()
    current_memory["rewards"][:] = reward
    return policy_return, current_memory, masks, reward


def main(rl_setting, algorithm, loss_function, opt):
    envs = VecHike(rl_setting["num_processes"])
    actor_critic = RNNPolicy(envs.n_actions, 2)
    rollouts = RolloutStorage(rl_setting["num_steps"], rl_setting["num_processes"])
    current_memory = {
        "current_obs": torch.from_numpy(envs.reset()).float(),
        "states": actor_critic.new_latent_state(rl_setting["num_processes"]),
        "oneHotActions": torch.zeros(rl_setting["num_processes"], envs.n_actions),
        "rewards": torch.zeros(rl_setting["num_processes"], 1),
    }
    optimizer = optim.RMSprop(actor_critic.parameters(), opt["lr"], eps=opt["eps"], alpha=opt["alpha"])

    for j in range(loss_function["num_updates"]):
        tracked_values = collections.defaultdict(lambda: [])
        for step in range(rl_setting["num_steps"]):
            policy_return, current_memory, masks, reward = run_model(actor_critic, current_memory, envs)
            rollouts.insert(step, reward, masks)
            tracked_values["values"].append(policy_return.value_estimate)
            tracked_values["action_log_probs"].append(policy_return.action_log_probs)
            tracked_values["dist_entropy"].append(policy_return.dist_entropy)

        with torch.no_grad():
            next_value = actor_critic(current_memory=current_memory).value_estimate
        rollouts.compute_returns(next_value, rl_setting["gamma"])

        values = torch.stack(tuple(tracked_values["values"]), dim=0)
        action_log_probs = torch.stack(tuple(tracked_values["action_log_probs"]), dim=0)
        advantages = rollouts.returns[:-1] - values
        value_loss = advantages.pow(2).mean()
        action_loss = -(advantages.detach() * action_log_probs).mean()
        dist_entropy = torch.stack(tuple(tracked_values["dist_entropy"])).mean()
        total_loss = (value_loss * loss_function["value_loss_coef"]
                      + action_loss * loss_function["action_loss_coef"]
                      - dist_entropy * loss_function["entropy_coef"])

        optimizer.zero_grad()
        # Only reset the computation graph every 'multiplier_backprop_length' iterations
        retain_graph = j % algorithm["multiplier_backprop_length"] != 0
        total_loss.backward(retain_graph=retain_graph)
        nn.utils.clip_grad_norm_(actor_critic.parameters(), opt["max_grad_norm"])
        optimizer.step()
        if not retain_graph:
            current_memory["states"] = current_memory["states"].detach()
        rollouts.after_update()
    return total_loss.item()


if __name__ == "__main__":
    rl_setting = {"num_processes": 4, "num_steps": 5, "gamma": 0.99}
    algorithm = {"multiplier_backprop_length": 5}
    loss_function = {"num_updates": 6, "value_loss_coef": 0.5, "action_loss_coef": 1.0, "entropy_coef": 0.01}
    opt = {"lr": 7e-4, "eps": 1e-5, "alpha": 0.99, "max_grad_norm": 0.5}
    print(main(rl_setting, algorithm, loss_function, opt))
