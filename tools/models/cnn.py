"""A small ResNet-style CNN with batch norm, for rgpu's training tests.

stem: conv3x3(3 -> w) - bn - relu
stage 1: residual block (w -> w)
stage 2: residual block (w -> 2w, stride 2, 1x1 conv - bn shortcut), max pool 2
head: adaptive average pool to 1x1, linear (2w -> classes)

Input (N, 3, S, S) for S = 16 or 32; output (N, classes) logits.
"""
import torch.nn as nn
import torch.nn.functional as F


class ResBlock(nn.Module):
    """relu(bn(conv(relu(bn(conv(x))))) + shortcut(x))"""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.short is None else self.short(x)))


class ResNetSmall(nn.Module):
    def __init__(self, classes=10, width=16):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        self.stage1 = ResBlock(width, width)
        self.stage2 = ResBlock(width, 2 * width, stride=2)
        self.pool = nn.MaxPool2d(2)
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x):                                   # x is (N, 3, S, S)
        x = self.stage1(self.stem(x))                       # (N, w, S, S)
        x = self.pool(self.stage2(x))                       # (N, 2w, S/4, S/4)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)          # (N, 2w)
        return self.head(x)


if __name__ == "__main__":
    import torch
    m = ResNetSmall()
    print(m(torch.randn(8, 3, 16, 16)).shape, sum(p.numel() for p in m.parameters()), "parameters")
