# Source: https://github.com/bboylyg/NAD/issues/8
# Title: "How does the attention loss work"
# Thread: in Neural Attention Distillation's train_step the attention-transfer losses between the
# student's and the teacher's activation maps are computed from detached activations before
# backward(), so back-propagation does not go through the attention loss and only the cross-entropy
# term trains the student. The author confirmed and fixed it.
# Kept: a WRN-style student/teacher returning intermediate activations, an AT loss (normalised
# spatial attention maps, squared difference) summed over three groups with betas, and a train_step
# adding it to the cross-entropy with the activations detached. Added: tiny convnets, data, and the
# comparison with the train_step that keeps the student activations attached.
import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallWRN(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.block1 = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
        self.block2 = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1, stride=2), nn.ReLU())
        self.block3 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, stride=2), nn.ReLU())
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        activation1 = self.block1(x)
        activation2 = self.block2(activation1)
        activation3 = self.block3(activation2)
        return activation1, activation2, activation3, self.fc(activation3.mean(dim=(2, 3)))


class AT(nn.Module):
    def __init__(self, p=2.0):
        super().__init__()
        self.p = p

    def attention_map(self, fm, eps=1e-6):
        am = torch.pow(torch.abs(fm), self.p).mean(dim=1, keepdim=True)
        norm = torch.norm(am, dim=(2, 3), keepdim=True)
        return am / (norm + eps)

    def forward(self, fm_s, fm_t):
        return F.mse_loss(self.attention_map(fm_s), self.attention_map(fm_t))


def train_step(snet, tnet, criterions, x, y, betas=(500.0, 1000.0, 1000.0)):
    criterion_cls, criterion_at = criterions
    activation1_s, activation2_s, activation3_s, output_s = snet(x)
    activation1_t, activation2_t, activation3_t, _ = tnet(x)
    cls_loss = criterion_cls(output_s, y)
    at1_loss = criterion_at(activation1_s, activation1_t).detach() * betas[0]
    at2_loss = criterion_at(activation2_s, activation2_t).detach() * betas[1]
    at3_loss = criterion_at(activation3_s, activation3_t).detach() * betas[2]
    return at1_loss + at2_loss + at3_loss + cls_loss


def train_step_fixed(snet, tnet, criterions, x, y, betas=(500.0, 1000.0, 1000.0)):
    criterion_cls, criterion_at = criterions
    activation1_s, activation2_s, activation3_s, output_s = snet(x)
    with torch.no_grad():
        activation1_t, activation2_t, activation3_t, _ = tnet(x)
    cls_loss = criterion_cls(output_s, y)
    at1_loss = criterion_at(activation1_s, activation1_t) * betas[0]
    at2_loss = criterion_at(activation2_s, activation2_t) * betas[1]
    at3_loss = criterion_at(activation3_s, activation3_t) * betas[2]
    return at1_loss + at2_loss + at3_loss + cls_loss


def student_grads(step_fn, snet, tnet, x, y):
    snet.zero_grad()
    step_fn(snet, tnet, (nn.CrossEntropyLoss(), AT(2.0)), x, y).backward()
    return [p.grad.clone() for p in snet.parameters()]


if __name__ == "__main__":
    torch.manual_seed(0)
    student, teacher = SmallWRN(), SmallWRN().requires_grad_(False)
    x, y = torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 3])
    g_bug = student_grads(train_step, student, teacher, x, y)
    g_fix = student_grads(train_step_fixed, student, teacher, x, y)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
