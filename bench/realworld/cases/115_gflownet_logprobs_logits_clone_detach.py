# Thread: https://github.com/alexhernandezgarcia/gflownet/pull/251
# Title: "Fix: get_logprobs of base env (reason why TB was not training well)"
# Diagnosis from the thread: the base environment's get_logprobs() copied the policy outputs with
# `policy_outputs.clone().detach()` before masking invalid actions in place, which cut the gradient path from the
# trajectory-balance loss to the forward policy; training kept running (log Z still learned) but the policy did not.
# Fix: clone without detaching (the in-place masking on the clone is fine).
# Kept from the thread: an environment class whose get_logprobs(policy_outputs, actions, mask, ...) builds logits
# from the policy outputs, masks invalid actions with -inf in place and takes log_softmax at the chosen actions, and
# a GFlowNet agent computing the trajectory-balance loss from the summed forward log-probs and a learned log Z.
# Added: a tiny 1-D grid environment, a uniform backward policy, fixed trajectories, and a driver comparing the
# policy's gradients with the fixed get_logprobs.
import torch
import torch.nn as nn

torch.manual_seed(0)


class GFlowNetEnv:
    """Base environment: states are positions 0..length on a line; actions are +1, +2 or stop (index 2)."""

    def __init__(self, length=4):
        self.length = length
        self.action_space = [1, 2, 0]
        self.eos = 2

    def state2policy(self, states):
        return nn.functional.one_hot(states, self.length + 1).float()

    def get_mask_invalid_actions_forward(self, states):
        mask = torch.zeros(len(states), len(self.action_space), dtype=torch.bool)
        mask[:, 0] = states + 1 > self.length
        mask[:, 1] = states + 2 > self.length
        return mask

    def get_logprobs(self, policy_outputs, is_forward, actions, mask_invalid_actions):
        device = policy_outputs.device
        ns_range = torch.arange(policy_outputs.shape[0]).to(device)
        logits = policy_outputs.clone().detach()
        if mask_invalid_actions is not None:
            logits[mask_invalid_actions] = -torch.inf
        logprobs = torch.log_softmax(logits, dim=1)
        return logprobs[ns_range, actions]

    def reward(self, states):
        return (states.float() + 1.0) / (self.length + 1)


class GFlowNetEnvFixed(GFlowNetEnv):
    def get_logprobs(self, policy_outputs, is_forward, actions, mask_invalid_actions):
        ns_range = torch.arange(policy_outputs.shape[0])
        logits = policy_outputs.clone()
        if mask_invalid_actions is not None:
            logits[mask_invalid_actions] = -torch.inf
        logprobs = torch.log_softmax(logits, dim=1)
        return logprobs[ns_range, actions]


class GFlowNetAgent:
    def __init__(self, env):
        self.env = env
        self.forward_policy = nn.Sequential(nn.Linear(env.length + 1, 16), nn.LeakyReLU(),
                                            nn.Linear(16, len(env.action_space)))
        self.logZ = nn.Parameter(torch.zeros(1))

    def trajectorybalance_loss(self, trajectories):
        losses = []
        for traj in trajectories:
            states = torch.tensor([s for s, _ in traj])
            actions = torch.tensor([a for _, a in traj])
            policy_outputs = self.forward_policy(self.env.state2policy(states))
            mask = self.env.get_mask_invalid_actions_forward(states)
            logprobs_f = self.env.get_logprobs(policy_outputs, True, actions, mask).sum()
            n_parents = torch.tensor([max(1, min(2, int(s))) for s, _ in traj[1:]], dtype=torch.float)
            logprobs_b = -torch.log(n_parents).sum()
            final_state = torch.tensor(traj[-1][0])
            log_reward = torch.log(self.env.reward(final_state))
            losses.append((self.logZ + logprobs_f - log_reward - logprobs_b) ** 2)
        return torch.stack(losses).mean()


TRAJECTORIES = [
    [(0, 0), (1, 1), (3, 0), (4, 2)],
    [(0, 1), (2, 1), (4, 2)],
    [(0, 0), (1, 2)],
]


def policy_grads(env_cls):
    torch.manual_seed(0)
    agent = GFlowNetAgent(env_cls())
    optimizer = torch.optim.Adam(list(agent.forward_policy.parameters()) + [agent.logZ], lr=1e-3)
    optimizer.zero_grad()
    agent.trajectorybalance_loss(TRAJECTORIES).backward()
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in agent.forward_policy.parameters()]


if __name__ == "__main__":
    buggy = policy_grads(GFlowNetEnv)
    fixed = policy_grads(GFlowNetEnvFixed)
    if not all(torch.allclose(a, b) for a, b in zip(buggy, fixed)):
        print("gradguard-case: gradients differ from the fix")
