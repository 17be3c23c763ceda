# Source: https://github.com/ProGamerGov/neural-style-pt/issues/44
# Title: "Cannot use conv layers in vvg-19"
# Diagnosis from the thread: neural-style-pt rebuilds VGG as an nn.Sequential layer by layer and inserts a
# StyleLoss / ContentLoss module right after each requested layer; asking for a conv layer (conv1_1) puts the
# loss module between the conv and its ReLU. The loss computes a gram matrix from a flattened view of the conv
# output (mm saves that view), and the following nn.ReLU(inplace=True) then overwrites the conv output, so L-BFGS's
# first loss.backward() fails ("[64, H*W], which is output 0 of ViewBackward, is at version 1"). relu layers work
# because nothing after them writes in place; using out-of-place ReLUs (or a clone in the loss module) fixes conv
# layers. Kept from the thread: the layer-by-layer net building with conv/relu/pool naming and loss insertion by
# name, GramMatrix via view + mm, StyleLoss with capture/loss modes, content loss, the L-BFGS feval closure.
# Added: a tiny VGG-like stack instead of VGG-19, 16x16 images, two iterations.
import torch
import torch.nn as nn


class GramMatrix(nn.Module):
    def forward(self, input):
        B, C, H, W = input.size()
        x_flat = input.view(C, H * W)
        return torch.mm(x_flat, x_flat.t())


class StyleLoss(nn.Module):
    def __init__(self, strength):
        super().__init__()
        self.target = torch.Tensor()
        self.strength = strength
        self.gram = GramMatrix()
        self.crit = nn.MSELoss()
        self.mode = "None"

    def forward(self, input):
        self.G = self.gram(input)
        self.G = self.G.div(input.nelement())
        if self.mode == "capture":
            self.target = self.G.detach()
        elif self.mode == "loss":
            self.loss = self.strength * self.crit(self.G, self.target)
        return input


class ContentLoss(nn.Module):
    def __init__(self, strength):
        super().__init__()
        self.strength = strength
        self.crit = nn.MSELoss()
        self.mode = "None"

    def forward(self, input):
        if self.mode == "capture":
            self.target = input.detach()
        elif self.mode == "loss":
            self.loss = self.strength * self.crit(input, self.target)
        return input


def make_cnn():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(8, 8, 3, padding=1),
                         nn.ReLU(inplace=True), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(inplace=True))


def build_net(cnn, layer_list, content_layers, style_layers, content_weight=5e0, style_weight=1e2):
    net = nn.Sequential()
    content_losses, style_losses = [], []
    c, r, p, i = 1, 1, 1, 0
    for layer in list(cnn):
        if isinstance(layer, nn.Conv2d):
            name = layer_list[i]
            net.add_module(name, layer)
            i += 1
        elif isinstance(layer, nn.ReLU):
            name = layer_list[i]
            net.add_module(name, layer)
            i += 1
        else:
            name = layer_list[i]
            net.add_module(name, layer)
            i += 1
        if name in content_layers:
            loss_module = ContentLoss(content_weight)
            net.add_module("content_loss_" + name, loss_module)
            content_losses.append(loss_module)
        if name in style_layers:
            loss_module = StyleLoss(style_weight)
            net.add_module("style_loss_" + name, loss_module)
            style_losses.append(loss_module)
    return net, content_losses, style_losses


def main():
    torch.manual_seed(0)
    layer_list = ["conv1_1", "relu1_1", "conv1_2", "relu1_2", "pool1", "conv2_1", "relu2_1"]
    net, content_losses, style_losses = build_net(make_cnn(), layer_list, content_layers=["relu2_1"],
                                                  style_layers=["conv1_1", "relu2_1"])
    for param in net.parameters():
        param.requires_grad = False
    content_image, style_image = torch.rand(1, 3, 16, 16), torch.rand(1, 3, 16, 16)
    for m in content_losses:
        m.mode = "capture"
    net(content_image)
    for m in content_losses:
        m.mode = "None"
    for m in style_losses:
        m.mode = "capture"
    net(style_image)
    for m in content_losses + style_losses:
        m.mode = "loss"
    img = nn.Parameter(content_image.clone())
    optimizer = torch.optim.LBFGS([img], max_iter=2)

    def feval():
        optimizer.zero_grad()
        net(img)
        loss = sum(m.loss for m in content_losses) + sum(m.loss for m in style_losses)
        loss.backward()
        return loss

    optimizer.step(feval)


if __name__ == "__main__":
    main()
    print("ok")
