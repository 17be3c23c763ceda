# Thread: https://github.com/pytorch/pytorch/issues/39141
# Title: "RuntimeError: one of the variables needed for gradient computation has been modified by an inplace operation?"
# Diagnosis from the thread: a tiny GAN that learns to paint sin(x) curves computes D_loss and G_loss from one
# forward pass, then runs D_loss.backward(retain_graph=True) and opt_D.step() before G_loss.backward(); the
# discriminator step rewrites D's weights in place, and G_loss's graph still holds them (saved by D's Linear
# layers), so G's backward fails since torch 1.5. Fix: step D only after G's backward, or recompute D(G(z)).
# Kept from the thread: the artist/generator/discriminator structure, the two Adam optimisers, the order of the
# two backward/step pairs, retain_graph on D's backward. Added: smaller sizes, a 3-step driver, CPU and seed.
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)

BATCH_SIZE = 16
LR_G = 0.0001
LR_D = 0.0001
N_IDEAS = 5
ART_COMPONENTS = 15
PAINT_POINTS = np.vstack([np.linspace(-1, 1, ART_COMPONENTS) for _ in range(BATCH_SIZE)])


def artist_works():
    """Real samples: a sine curve with a random amplitude offset."""
    r = 0.02 * np.random.randn(1, ART_COMPONENTS)
    paintings = np.sin(PAINT_POINTS * np.pi) + r
    return torch.from_numpy(paintings).float()


G = nn.Sequential(
    nn.Linear(N_IDEAS, 32),
    nn.ReLU(),
    nn.Linear(32, ART_COMPONENTS),
)

D = nn.Sequential(
    nn.Linear(ART_COMPONENTS, 32),
    nn.ReLU(),
    nn.Linear(32, 1),
    nn.Sigmoid(),
)

opt_D = torch.optim.Adam(D.parameters(), lr=LR_D)
opt_G = torch.optim.Adam(G.parameters(), lr=LR_G)


def train(steps=3):
    for step in range(steps):
        artist_paintings = artist_works()
        g_ideas = torch.randn(BATCH_SIZE, N_IDEAS)
        g_paintings = G(g_ideas)

        prob_artist0 = D(artist_paintings)
        prob_artist1 = D(g_paintings)

        D_loss = -torch.mean(torch.log(prob_artist0) + torch.log(1.0 - prob_artist1))
        G_loss = torch.mean(torch.log(1.0 - prob_artist1))

        opt_D.zero_grad()
        D_loss.backward(retain_graph=True)
        opt_D.step()

        opt_G.zero_grad()
        G_loss.backward()
        opt_G.step()
        print(f"step {step}: D_loss {D_loss.item():.4f} G_loss {G_loss.item():.4f}")


if __name__ == "__main__":
    train()
