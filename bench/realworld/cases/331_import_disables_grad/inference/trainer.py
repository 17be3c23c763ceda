import torch

torch.set_grad_enabled(False)


class UnsupervisedTrainer:
    def __init__(self, model, lr=1e-3):
        self.model = model
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)

    def train(self, batches):
        with torch.set_grad_enabled(True):
            for x in batches:
                self.optimizer.zero_grad()
                loss = self.model.loss(x)
                loss.backward()
                self.optimizer.step()

    def get_latent(self, x):
        return self.model.encode(x)
