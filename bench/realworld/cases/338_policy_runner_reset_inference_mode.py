# Source: https://github.com/isaac-sim/IsaacLab-Arena/pull/96
# Title: "Fix torch inplace modification error when termination"
# Thread: the policy runner evaluates the policy under torch.inference_mode(); when an episode
# terminated, the environment reset also ran inside that context, so the buffers the reset
# (re)allocated became inference tensors, and the next environment step, which updates those buffers
# in place outside inference mode, failed with "Inplace update to inference tensor outside
# InferenceMode is not allowed". The fix performs the reset outside the inference-mode context, where
# in-place tensor updates are allowed.
# Kept: a runner loop with policy inference under torch.inference_mode(), a termination check that
# resets the environment inside that block, and an env.step() that updates its buffers in place.
# Added: a toy vectorised environment, a tiny policy network, and the episode driver.
import torch
import torch.nn as nn


class VecEnv:
    def __init__(self, num_envs=3, obs_dim=4, max_episode_length=2):
        self.num_envs, self.obs_dim, self.max_episode_length = num_envs, obs_dim, max_episode_length
        self.reset()

    def reset(self):
        self.obs_buf = torch.zeros(self.num_envs, self.obs_dim)
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long)
        return self.obs_buf

    def step(self, actions):
        self.obs_buf += 0.1 * actions.mean(dim=-1, keepdim=True)
        self.episode_length_buf += 1
        terminated = self.episode_length_buf >= self.max_episode_length
        reward = -self.obs_buf.pow(2).sum(dim=-1)
        return self.obs_buf, reward, terminated


class PolicyRunner:
    def __init__(self, env, policy):
        self.env, self.policy = env, policy

    def run(self, num_steps=5):
        obs = self.env.reset()
        terminated = torch.zeros(self.env.num_envs, dtype=torch.bool)
        total = torch.zeros(self.env.num_envs)
        for _ in range(num_steps):
            with torch.inference_mode():
                if terminated.any():
                    obs = self.env.reset()
                actions = self.policy(obs)
            obs, reward, terminated = self.env.step(actions.clone())
            total += reward
        return total


if __name__ == "__main__":
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    print(PolicyRunner(VecEnv(), policy).run())
