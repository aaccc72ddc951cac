# SPDX-License-Identifier: GPL-2.0
"""A VGG-19-shaped network small enough to train under TCG.

VGG-19's shape is what makes P3 pay: sixteen 3x3 convolutions that hold
little (14% of the parameters) but need most of the compute and come first
in the forward pass, then three fully connected layers that hold most of
the bytes and come last.  Kept here: the 16 + 3 layer sequence, the five
pooling stages, channels doubling per stage, and the split of parameters
between convolutions and fully connected layers (13% and 87%; VGG-19:
14% and 86%), with the channels divided by 8 and 32x32 inputs so that a
step takes a second, not minutes, on an emulated CPU.
"""
import torch

# (channels, convolutions) per stage, VGG-19's / 8.
STAGES = ((8, 2), (16, 2), (32, 4), (64, 4), (64, 4))
FC = 1024           # VGG's 4096 / 4
CLASSES = 10
# fc7's width that gives VGG-19's tail: fc7 and fc8 (and fc6's bias) then
# hold 16% of the bytes, as in VGG-19 (15%), where with fc7 as wide as
# fc6 they hold 44%.  The planner's tail-first order moves a tail of at
# most a quarter of the bytes ahead (p3.plan), so only this shape tells
# the two orders apart.
VGG_TAIL_FC7 = FC // 4


class VGGSmall(torch.nn.Sequential):
    def __init__(self, fc7=FC):
        layers, cin, size = [], 3, 32
        for stage, (cout, n) in enumerate(STAGES):
            for _ in range(n):
                layers += [torch.nn.Conv2d(cin, cout, 3, padding=1),
                           torch.nn.ReLU(inplace=True)]
                cin = cout
            # VGG pools after every stage, from 224x224; from 32x32 the last
            # two stages keep 4x4, so that fc6 (as in VGG) is the largest
            # layer and sees a spatial map, not a vector.
            if stage < 3:
                layers.append(torch.nn.MaxPool2d(2))
                size //= 2
        layers += [torch.nn.Flatten(),
                   torch.nn.Linear(cin * size * size, FC), torch.nn.ReLU(inplace=True),
                   torch.nn.Linear(FC, fc7), torch.nn.ReLU(inplace=True),
                   torch.nn.Linear(fc7, CLASSES)]
        super().__init__(*layers)


def describe(model):
    conv = sum(p.numel() for m in model.modules()
               if isinstance(m, torch.nn.Conv2d) for p in m.parameters())
    total = sum(p.numel() for p in model.parameters())
    return {'params': total, 'bytes': 4 * total, 'conv_share': conv / total}


if __name__ == '__main__':
    print(describe(VGGSmall()), describe(VGGSmall(VGG_TAIL_FC7)))
