# Thread: https://github.com/juliusfrost/dreamer-pytorch/issues/52
# Title: "main.py does not run on pytorch==1.5.0"
# Diagnosis from the thread: the rlpyt Dreamer's optimize_agent() backpropagated and stepped the world model
# (model_loss.backward(); model_optimizer.step()) before actor_loss.backward(); the actor loss comes from an imagined
# rollout through the model's transition and reward networks, so since torch 1.5 its backward meets model weights the
# model step had already rewritten. The repository's fix computes all three backward passes first and only then steps
# the model, actor and value optimisers (with FreezeParameters around the model/value evaluation of imagined states).
# Kept from the thread's code: DreamerAlgo.loss() returning (model_loss, actor_loss, value_loss) from one replay batch
# (posterior rollout, image/reward/KL model loss, imagination with the policy from detached posterior states, lambda
# returns, discounted actor loss, value loss on detached targets), FreezeParameters, the three optimisers and the
# per-loss zero_grad/backward/clip/step blocks in the pre-fix order. Added: tiny MLP world model on flat observations,
# random replay batch, horizon 3, one optimisation step.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal

torch.manual_seed(0)
OBS, EMBED, DETER, STOCH, ACT, HID = 10, 8, 8, 4, 2, 16


class FreezeParameters:
    def __init__(self, modules):
        self.modules = modules
        self.param_states = [p.requires_grad for m in modules for p in m.parameters()]

    def __enter__(self):
        for m in self.modules:
            for p in m.parameters():
                p.requires_grad = False

    def __exit__(self, *exc):
        i = 0
        for m in self.modules:
            for p in m.parameters():
                p.requires_grad = self.param_states[i]
                i += 1


def get_parameters(modules):
    return [p for m in modules for p in m.parameters()]


class WorldModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.observation_encoder = nn.Linear(OBS, EMBED)
        self.observation_decoder = nn.Linear(DETER + STOCH, OBS)
        self.rnn = nn.GRUCell(STOCH + ACT, DETER)
        self.prior_net = nn.Linear(DETER, 2 * STOCH)
        self.post_net = nn.Linear(DETER + EMBED, 2 * STOCH)
        self.reward_model = nn.Sequential(nn.Linear(DETER + STOCH, HID), nn.ELU(), nn.Linear(HID, 1))
        self.value_model = nn.Sequential(nn.Linear(DETER + STOCH, HID), nn.ELU(), nn.Linear(HID, 1))
        self.policy = nn.Sequential(nn.Linear(DETER + STOCH, HID), nn.ELU(), nn.Linear(HID, ACT), nn.Tanh())

    @staticmethod
    def dist(stats):
        mean, std = stats.chunk(2, dim=-1)
        return Normal(mean, F.softplus(std) + 0.1)

    def transition(self, stoch, deter, action):
        deter = self.rnn(torch.cat([stoch, action], -1), deter)
        return self.dist(self.prior_net(deter)), deter


class DreamerAlgo:
    def __init__(self, model, horizon=3, discount=0.99, discount_lambda=0.95, grad_clip=100.0):
        self.model, self.horizon, self.discount, self.discount_lambda = model, horizon, discount, discount_lambda
        self.grad_clip = grad_clip
        self.model_modules = [model.observation_encoder, model.observation_decoder, model.rnn, model.prior_net,
                              model.post_net, model.reward_model]
        self.actor_modules, self.value_modules = [model.policy], [model.value_model]
        self.model_optimizer = torch.optim.Adam(get_parameters(self.model_modules), lr=6e-4)
        self.actor_optimizer = torch.optim.Adam(get_parameters(self.actor_modules), lr=8e-5)
        self.value_optimizer = torch.optim.Adam(get_parameters(self.value_modules), lr=8e-5)

    def loss(self, observation, action, reward):
        model = self.model
        T, B = observation.shape[:2]
        embed = model.observation_encoder(observation)
        deter, stoch = torch.zeros(B, DETER), torch.zeros(B, STOCH)
        posts, priors, feats = [], [], []
        for t in range(T):
            prior, deter = model.transition(stoch, deter, action[t])
            post = model.dist(model.post_net(torch.cat([deter, embed[t]], -1)))
            stoch = post.rsample()
            priors.append(prior)
            posts.append(post)
            feats.append(torch.cat([deter, stoch], -1))
        feat = torch.stack(feats)
        image_loss = F.mse_loss(model.observation_decoder(feat), observation)
        reward_loss = F.mse_loss(model.reward_model(feat), reward)
        div = torch.stack([torch.distributions.kl_divergence(p, q).mean() for p, q in zip(posts, priors)]).mean()
        model_loss = div + reward_loss + image_loss

        with torch.no_grad():
            flat_post = feat.reshape(T * B, -1)
        imag_deter, imag_stoch = flat_post[:, :DETER], flat_post[:, DETER:]
        imag_feats = []
        for _ in range(self.horizon):
            imag_action = model.policy(torch.cat([imag_deter, imag_stoch], -1))
            prior, imag_deter = model.transition(imag_stoch, imag_deter, imag_action)
            imag_stoch = prior.rsample()
            imag_feats.append(torch.cat([imag_deter, imag_stoch], -1))
        imag_feat = torch.stack(imag_feats)
        with FreezeParameters(self.model_modules + self.value_modules):
            imag_reward = model.reward_model(imag_feat)
            value = model.value_model(imag_feat)
        discount_arr = self.discount * torch.ones_like(imag_reward)
        returns = self.compute_return(imag_reward[:-1], value[:-1], discount_arr[:-1], value[-1], self.discount_lambda)
        discount = torch.cumprod(torch.cat([torch.ones_like(discount_arr[:1]), discount_arr[1:]])[:-1], 0)
        actor_loss = -torch.mean(discount * returns)

        with torch.no_grad():
            value_feat, value_target, value_discount = imag_feat[:-1].detach(), returns.detach(), discount.detach()
        value_loss = torch.mean(value_discount * (model.value_model(value_feat) - value_target) ** 2)
        return model_loss, actor_loss, value_loss

    def compute_return(self, reward, value, discount, bootstrap, lambda_):
        next_values = torch.cat([value[1:], bootstrap[None]], 0)
        target = reward + discount * next_values * (1 - lambda_)
        outputs, accumulated_reward = [], bootstrap
        for t in range(reward.shape[0] - 1, -1, -1):
            accumulated_reward = target[t] + discount[t] * lambda_ * accumulated_reward
            outputs.append(accumulated_reward)
        return torch.flip(torch.stack(outputs), [0])

    def optimize_agent(self, observation, action, reward):
        model_loss, actor_loss, value_loss = self.loss(observation, action, reward)

        self.model_optimizer.zero_grad()
        model_loss.backward()
        torch.nn.utils.clip_grad_norm_(get_parameters(self.model_modules), self.grad_clip)
        self.model_optimizer.step()

        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        torch.nn.utils.clip_grad_norm_(get_parameters(self.actor_modules), self.grad_clip)
        self.actor_optimizer.step()

        self.value_optimizer.zero_grad()
        value_loss.backward()
        torch.nn.utils.clip_grad_norm_(get_parameters(self.value_modules), self.grad_clip)
        self.value_optimizer.step()
        return model_loss.item(), actor_loss.item(), value_loss.item()


if __name__ == "__main__":
    T, B = 4, 3
    algo = DreamerAlgo(WorldModel())
    print(algo.optimize_agent(torch.randn(T, B, OBS), torch.rand(T, B, ACT) * 2 - 1, torch.randn(T, B, 1)))
