# Thread: https://github.com/pytorch/tutorials/pull/30
# Title: "Fixed clamp not being applied to parameters"
# Diagnosis from the thread: the reinforcement-learning (DQN) tutorial's optimize_model() clips the gradients
# before the optimizer step with `param.grad.data.clamp(-1, 1)` for every parameter. clamp returns a new tensor
# and the result is thrown away, so the step uses the unclipped gradients. The maintainer confirmed ("my bad")
# and merged the in-place `param.grad.data.clamp_(-1, 1)`.
# Kept: Transition namedtuple and ReplayMemory, the DQN conv net (here without its BatchNorm layers),
# epsilon-greedy select_action, optimize_model (batch from memory, non-final mask, Q(s, a) by gather,
# max_a Q(s', a) for non-final next states computed without grad, expected values, Huber loss, RMSprop, the
# clipping loop, step). Added: random raw-pixel 3x20x20 screens in place of the CartPole render, large rewards,
# and the comparison of the gradients the optimizer step receives with the in-place clamp_ version.
import math
import random
from collections import namedtuple

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
random.seed(0)

Transition = namedtuple("Transition", ("state", "action", "next_state", "reward"))


class ReplayMemory:
    def __init__(self, capacity):
        self.capacity, self.memory, self.position = capacity, [], 0

    def push(self, *args):
        if len(self.memory) < self.capacity:
            self.memory.append(None)
        self.memory[self.position] = Transition(*args)
        self.position = (self.position + 1) % self.capacity

    def sample(self, batch_size):
        return random.sample(self.memory, batch_size)

    def __len__(self):
        return len(self.memory)


class DQN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=5, stride=2)
        self.conv2 = nn.Conv2d(8, 16, kernel_size=5, stride=2)
        self.head = nn.Linear(16 * 2 * 2, 2)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.head(x.view(x.size(0), -1))


EPS_START, EPS_END, EPS_DECAY, GAMMA, BATCH_SIZE = 0.9, 0.05, 200, 0.999, 16
steps_done = 0


def select_action(model, state):
    global steps_done
    eps_threshold = EPS_END + (EPS_START - EPS_END) * math.exp(-1. * steps_done / EPS_DECAY)
    steps_done += 1
    if random.random() > eps_threshold:
        with torch.no_grad():
            return model(state).max(1)[1].view(1, 1)
    return torch.tensor([[random.randrange(2)]], dtype=torch.long)


def optimize_model(model, optimizer, memory, clip_in_place):
    transitions = memory.sample(BATCH_SIZE)
    batch = Transition(*zip(*transitions))
    non_final_mask = torch.tensor(tuple(s is not None for s in batch.next_state), dtype=torch.bool)
    non_final_next_states = torch.cat([s for s in batch.next_state if s is not None])
    state_batch, action_batch = torch.cat(batch.state), torch.cat(batch.action)
    reward_batch = torch.cat(batch.reward)

    state_action_values = model(state_batch).gather(1, action_batch)
    next_state_values = torch.zeros(BATCH_SIZE)
    with torch.no_grad():
        next_state_values[non_final_mask] = model(non_final_next_states).max(1)[0]
    expected_state_action_values = (next_state_values * GAMMA) + reward_batch
    loss = F.smooth_l1_loss(state_action_values, expected_state_action_values.unsqueeze(1))

    optimizer.zero_grad()
    loss.backward()
    for param in model.parameters():
        if clip_in_place:
            param.grad.data.clamp_(-1, 1)
        else:
            param.grad.data.clamp(-1, 1)
    grads = [p.grad.clone() for p in model.parameters()]
    optimizer.step()
    return grads


if __name__ == "__main__":
    model = DQN()
    memory = ReplayMemory(1000)
    state = torch.rand(1, 3, 20, 20) * 255
    model.train()
    for t in range(40):
        action = select_action(model, state)
        next_state = None if t % 10 == 9 else torch.rand(1, 3, 20, 20) * 255
        memory.push(state, action, next_state, torch.tensor([50.0 * random.random()]))
        state = next_state if next_state is not None else torch.rand(1, 3, 20, 20) * 255
    fixed = DQN()
    fixed.load_state_dict(model.state_dict())
    random.seed(1)
    g_bug = optimize_model(model, torch.optim.RMSprop(model.parameters()), memory, clip_in_place=False)
    random.seed(1)
    g_fix = optimize_model(fixed, torch.optim.RMSprop(fixed.parameters()), memory, clip_in_place=True)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
