# Thread: https://github.com/isayev/ReLeaSE/issues/39
# Title: "Weights are not updating"
# Diagnosis from the thread: to get around a CUDA-to-numpy error the user changed the policy-gradient accumulation to
# `rl_loss -= (log_probs[0, top_i].item() * discounted_reward)` (and a .cpu().detach().numpy() variant); the
# maintainer's answer: that change detaches rl_loss from the computational graph, so there is nothing to
# backpropagate and the generator's weights cannot update. With .item() the loss is a plain Python float and
# rl_loss.backward() fails outright.
# Kept from the thread: Reinforcement.policy_gradient() (sample a SMILES-like trajectory from the generator until the
# reward is non-zero, follow it character by character through the recurrent generator, accumulate the discounted
# -log_prob * reward, divide by n_batch, backward, optimizer step) and the user's .item() change. Added: a small GRU
# generator instead of the stack-augmented RNN, a toy alphabet and reward, deterministic sampling seeds.
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class GeneratorData:
    def __init__(self, alphabet="<>CNO()=1"):
        self.all_characters = alphabet
        self.n_characters = len(alphabet)

    def char_tensor(self, string):
        return torch.tensor([self.all_characters.index(c) for c in string], dtype=torch.long)


class RecurrentGenerator(nn.Module):
    def __init__(self, data, hidden_size=16, lr=0.01):
        super().__init__()
        self.data, self.hidden_size = data, hidden_size
        self.encoder = nn.Embedding(data.n_characters, hidden_size)
        self.rnn = nn.GRUCell(hidden_size, hidden_size)
        self.decoder = nn.Linear(hidden_size, data.n_characters)
        self.optimizer = torch.optim.Adadelta(self.parameters(), lr=lr)

    def init_hidden(self):
        return torch.zeros(1, self.hidden_size)

    def forward(self, inp, hidden):
        hidden = self.rnn(self.encoder(inp.view(1)), hidden)
        return self.decoder(hidden), hidden

    def evaluate(self, data, predict_len=8, gen=None):
        with torch.no_grad():
            hidden, inp, out = self.init_hidden(), data.char_tensor("<"), "<"
            for _ in range(predict_len):
                output, hidden = self.forward(inp[-1], hidden)
                top_i = torch.multinomial(F.softmax(output, dim=1)[0], 1, generator=gen)
                char = data.all_characters[top_i]
                out += char
                if char == ">":
                    break
                inp = data.char_tensor(char)
            return out if out.endswith(">") else out + ">"


def get_reward(smiles, predictor=None):
    return float(smiles.count("C") + 1)


class Reinforcement:
    def __init__(self, generator, predictor, get_reward):
        self.generator, self.predictor, self.get_reward = generator, predictor, get_reward

    def policy_gradient(self, data, n_batch=2, gamma=0.97):
        rl_loss = 0
        self.generator.optimizer.zero_grad()
        total_reward = 0
        gen = torch.Generator().manual_seed(3)
        for _ in range(n_batch):
            reward = 0
            while reward == 0:
                trajectory = self.generator.evaluate(data, gen=gen)
                reward = self.get_reward(trajectory[1:-1], self.predictor)
            trajectory_input = data.char_tensor(trajectory)
            discounted_reward = reward
            total_reward += reward
            hidden = self.generator.init_hidden()
            for p in range(len(trajectory) - 1):
                output, hidden = self.generator(trajectory_input[p], hidden)
                log_probs = F.log_softmax(output, dim=1)
                top_i = trajectory_input[p + 1]
                rl_loss -= (log_probs[0, top_i].item() * discounted_reward)
                discounted_reward = discounted_reward * gamma
        rl_loss = rl_loss / n_batch
        total_reward = total_reward / n_batch
        rl_loss.backward()
        self.generator.optimizer.step()
        return total_reward, rl_loss.item()


if __name__ == "__main__":
    data = GeneratorData()
    RL = Reinforcement(RecurrentGenerator(data), None, get_reward)
    print(RL.policy_gradient(data))
