# SPDX-License-Identifier: GPL-2.0
"""The models bench/ddp trains (random weights: nothing is downloaded),
sized for 32x32 inputs and 10 classes: torchvision's resnet18, vgg11 and
squeezenet1_1 as examples/nets.py writes them, under every torch (pip's
torch 2.13 has no torchvision), so that each torch trains the same code."""
import os
import sys

import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                '..', '..', 'examples'))
import nets  # noqa: E402


def vgg11_small():
    """VGG-11's convolutions with a 512-wide classifier: at 32x32 the
    features end at 1x1, and torchvision's 25088-wide classifier would
    hold 93% of the bytes."""
    m = nets.vgg11(num_classes=10)
    m.avgpool = nn.AdaptiveAvgPool2d(1)
    m.classifier = nn.Sequential(nn.Linear(512, 512), nn.ReLU(inplace=True),
                                 nn.Linear(512, 10))
    return m


MODELS = {
    'resnet18': lambda: nets.resnet18(num_classes=10),
    'vgg11': vgg11_small,
    'squeezenet1_1': lambda: nets.squeezenet1_1(num_classes=10),
}


def model_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters())
