# Source: https://github.com/vikrant7/mobile-vod-bottleneck-lstm/issues/25
# Title: "Runtime error of inplace operation"
# Diagnosis from the thread: the video detector keeps its Bottleneck-LSTM (h, c) on the module; the training loop
# runs one backward(retain_graph=True) + optimizer.step() per frame of a sequence but calls net.detach_hidden()
# only after the whole sequence, so the next frame's backward runs back into the previous frames' graph, whose
# convolution weights optimizer.step() has since updated in place; the error is reported from F.conv. The
# commenter's fix moves net.detach_hidden() into the inner per-frame loop. Kept from the thread: a MobileNet-ish
# feature extractor, a convolutional Bottleneck-LSTM cell holding hidden_state/cell_state with detach_hidden(),
# an SSD-like head (confidence, locations), the train loop over (images, boxes, labels) sequences with the
# per-frame step. Added: tiny sizes and a toy MultiBox-like criterion.
import torch
import torch.nn as nn
import torch.nn.functional as F


class BottleneckLSTMCell(nn.Module):
    def __init__(self, input_channels, hidden_channels):
        super().__init__()
        self.W = nn.Conv2d(input_channels, input_channels, 3, padding=1, groups=input_channels)
        self.Wy = nn.Conv2d(input_channels + hidden_channels, hidden_channels, 1)
        self.Wi = nn.Conv2d(hidden_channels, hidden_channels, 3, padding=1, groups=hidden_channels, bias=False)
        self.Wbi = nn.Conv2d(hidden_channels, hidden_channels, 1)
        self.Wbf = nn.Conv2d(hidden_channels, hidden_channels, 1)
        self.Wbc = nn.Conv2d(hidden_channels, hidden_channels, 1)
        self.Wbo = nn.Conv2d(hidden_channels, hidden_channels, 1)

    def forward(self, x, h, c):
        x = self.W(x)
        y = torch.cat((x, h), 1)
        i = self.Wy(y)
        b = self.Wi(i)
        ci = torch.sigmoid(self.Wbi(b))
        cf = torch.sigmoid(self.Wbf(b))
        cc = cf * c + ci * F.relu6(self.Wbc(b))
        co = torch.sigmoid(self.Wbo(b))
        ch = co * F.relu6(cc)
        return ch, cc


class BottleneckLSTM(nn.Module):
    def __init__(self, input_channels, hidden_channels, height, width, batch_size):
        super().__init__()
        self.cell = BottleneckLSTMCell(input_channels, hidden_channels)
        self.hidden_state = torch.zeros(batch_size, hidden_channels, height, width)
        self.cell_state = torch.zeros(batch_size, hidden_channels, height, width)

    def forward(self, x):
        new_h, new_c = self.cell(x, self.hidden_state, self.cell_state)
        self.hidden_state = new_h
        self.cell_state = new_c
        return self.hidden_state


class MobileVOD(nn.Module):
    def __init__(self, num_classes=3, batch_size=1):
        super().__init__()
        self.base = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU6(), nn.Conv2d(8, 8, 3, 2, 1), nn.ReLU6())
        self.lstm = BottleneckLSTM(8, 8, 4, 4, batch_size)
        self.classification = nn.Conv2d(8, num_classes * 2, 3, padding=1)
        self.regression = nn.Conv2d(8, 4 * 2, 3, padding=1)
        self.num_classes = num_classes

    def detach_hidden(self):
        self.lstm.hidden_state.detach_()
        self.lstm.cell_state.detach_()

    def forward(self, x):
        x = self.lstm(self.base(x))
        confidence = self.classification(x).permute(0, 2, 3, 1).reshape(x.size(0), -1, self.num_classes)
        locations = self.regression(x).permute(0, 2, 3, 1).reshape(x.size(0), -1, 4)
        return confidence, locations


def criterion(confidence, locations, labels, boxes):
    classification_loss = F.cross_entropy(confidence.reshape(-1, confidence.size(-1)), labels.reshape(-1))
    regression_loss = F.smooth_l1_loss(locations, boxes)
    return regression_loss, classification_loss


def train(loader, net, optimizer):
    net.train()
    running_loss = 0.0
    for i, data in enumerate(loader):
        images, boxes, labels = data
        for image, box, label in zip(images, boxes, labels):
            optimizer.zero_grad()
            confidence, locations = net(image)
            regression_loss, classification_loss = criterion(confidence, locations, label, box)
            loss = regression_loss + classification_loss
            loss.backward(retain_graph=True)
            optimizer.step()
            running_loss += loss.item()
        net.detach_hidden()
    return running_loss


if __name__ == "__main__":
    torch.manual_seed(0)
    net = MobileVOD()
    optimizer = torch.optim.RMSprop(net.parameters(), lr=1e-3)
    seq_len = 3
    loader = [(torch.randn(seq_len, 1, 3, 16, 16), torch.randn(seq_len, 1, 32, 4),
               torch.randint(0, 3, (seq_len, 1, 32)))]
    train(loader, net, optimizer)
    print("ok")
