# Source: https://github.com/pytorch/pytorch/issues/1926
# Title: "How to change the outputs of forward_hook?"
# Thread: the user hooks every ReLU inside the model's Sequential blocks to multiply its output by a
# per-layer selection map; inside the hook they rebind the local name
# (`outputs = torch.mul(outputs[0].data, select_maps)`), which changes nothing in the network. The
# answers: hooks did not support return values then; module hooks were later changed so a forward
# hook can replace the output by returning a new value (PR #22285), and the value must be computed
# from the output tensor itself (not `.data`) for gradients to follow it.
# Kept: a helper that walks model._modules, finds the ReLU at index 2 of each Sequential block and
# registers a forward hook that rebinds `outputs` to a `.data`-based product with select_maps.
# Added: the small conv model, a classification loss, and the fixed hook that returns output * map.
import torch
import torch.nn as nn
import torch.nn.functional as F


def make_model():
    return nn.Sequential(
        nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()),
        nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()),
        nn.Flatten(),
        nn.Linear(4 * 6 * 6, 3),
    )


def hook_forward_net(model, select_maps):
    handles = []

    def fun(module, inputs, outputs):
        outputs = torch.mul(outputs[0].data, select_maps[module])

    for key0, value0 in model._modules.items():
        if type(value0) == nn.Sequential:
            relu = value0._modules.get("2")
            if type(relu) == nn.ReLU:
                handles.append(relu.register_forward_hook(fun))
    return handles


def hook_forward_net_fixed(model, select_maps):
    handles = []

    def fun(module, inputs, outputs):
        return outputs * select_maps[module]

    for key0, value0 in model._modules.items():
        if type(value0) == nn.Sequential:
            relu = value0._modules.get("2")
            if type(relu) == nn.ReLU:
                handles.append(relu.register_forward_hook(fun))
    return handles


def grads_with(hooker, state, images, labels):
    model = make_model()
    model.load_state_dict(state)
    torch.manual_seed(1)
    select_maps = {m: (torch.rand(1, 4, 1, 1) > 0.5).float() for m in model.modules() if isinstance(m, nn.ReLU)}
    hooker(model, select_maps)
    F.cross_entropy(model(images), labels).backward()
    return [p.grad.clone() for p in model.parameters()]


if __name__ == "__main__":
    torch.manual_seed(0)
    state = make_model().state_dict()
    images, labels = torch.randn(2, 3, 6, 6), torch.tensor([0, 2])
    g_bug = grads_with(hook_forward_net, state, images, labels)
    g_fix = grads_with(hook_forward_net_fixed, state, images, labels)
    if not all(torch.allclose(a, b) for a, b in zip(g_bug, g_fix)):
        print("gradguard-case: gradients differ from the fix")
