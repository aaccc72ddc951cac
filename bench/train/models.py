#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Per-layer profiles of the models P3 was evaluated on.

The layer lists are written out from the architectures; parameter counts
and FLOPs are computed from them, never copied.  A "layer" is one unit of
compute together with every parameter it owns (a convolution with its
batch-norm, a fully connected layer with its bias, one LSTM layer), listed
in the order the forward pass first uses it.

FLOPs count the multiply-adds of convolutions, matrix products and LSTM
gates as 2 FLOPs each, per sample.  Element-wise work (batch-norm, ReLU,
pooling, softmax) is memory-bound and is folded into the efficiency below
rather than counted.  Backward is 2x forward (gradients of the input and of
the weights), except for a layer that receives the network's input, which
needs no input gradient (1x).

Compute time per layer = FLOPs * batch / (device peak * efficiency):

  device      NVIDIA Quadro P4000, 5.3 TFLOP/s fp32 peak (the GPU of P3's
              evaluation)
  efficiency  CNNs 35% (cuDNN on large batched convolutions); the LSTM
              model 15% (per-time-step GEMMs of 64 x 512 are too small to
              fill the GPU)
  batch       32 images per GPU for the CNNs (as P3), 64 sentences for
              Sockeye

Usage:
  bench/train/models.py [--out DIR] [--model NAME]...   writes NAME.json
"""
import argparse
import json
import os
import sys

DEVICE = {"name": "NVIDIA Quadro P4000", "peak_flops": 5.3e12}

# Published parameter totals that the profiles must reproduce (+-0.5%).
PUBLISHED_PARAMS = {
    "vgg19": 143.67e6,
    "resnet50": 25.56e6,
    "inception3": 23.8e6,
}


class Net:
    """Builds a layer list; sizes are tracked per sample."""

    def __init__(self, name, title):
        self.name, self.title = name, title
        self.layers = []
        self.first = True

    def add(self, name, params, macs, first=None):
        first = self.first if first is None else first
        self.first = False
        fwd = 2.0 * macs
        self.layers.append({"name": name, "params": int(params),
                            "fwd_flops": fwd,
                            "bwd_flops": fwd if first else 2.0 * fwd})

    def conv(self, name, cin, cout, kh, kw, hout, wout, bias=False, bn=0):
        """A convolution (+ bias) (+ `bn` batch-norm parameters per channel)."""
        params = kh * kw * cin * cout + (cout if bias else 0) + bn * cout
        self.add(name, params, hout * wout * kh * kw * cin * cout)

    def fc(self, name, nin, nout):
        self.add(name, nin * nout + nout, nin * nout)


# ------------------------------------------------------------------ VGG-19

def vgg19():
    """VGG-19 (configuration E), 224x224 input, biased convolutions, no BN."""
    net = Net("vgg19", "VGG-19")
    cin, size = 3, 224
    stages = [(64, 2), (128, 2), (256, 4), (512, 4), (512, 4)]
    for s, (cout, reps) in enumerate(stages, 1):
        for r in range(1, reps + 1):
            net.conv(f"conv{s}_{r}", cin, cout, 3, 3, size, size, bias=True)
            cin = cout
        size //= 2                                  # 2x2 max-pool
    net.fc("fc6", 512 * size * size, 4096)          # 7x7x512 -> 4096
    net.fc("fc7", 4096, 4096)
    net.fc("fc8", 4096, 1000)
    return net


# --------------------------------------------------------------- ResNet-50

def resnet50():
    """ResNet-50 v1.5 (stride on the 3x3 convolution), 224x224 input.  Each
    convolution carries its batch-norm's scale and shift (2 per channel)."""
    net = Net("resnet50", "ResNet-50")
    net.conv("conv1", 3, 64, 7, 7, 112, 112, bn=2)
    cin, size = 64, 56                              # 3x3/2 max-pool
    for s, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6),
                                         (512, 3)], 2):
        cout = 4 * width
        for b in range(blocks):
            stride = 2 if (b == 0 and s > 2) else 1
            out = size // stride
            p = f"res{s}{chr(ord('a') + b)}"
            net.conv(p + "_1x1a", cin, width, 1, 1, size, size, bn=2)
            net.conv(p + "_3x3", width, width, 3, 3, out, out, bn=2)
            net.conv(p + "_1x1b", width, cout, 1, 1, out, out, bn=2)
            if b == 0:
                net.conv(p + "_proj", cin, cout, 1, 1, out, out, bn=2)
            cin, size = cout, out
    net.fc("fc", 2048, 1000)                        # after global pooling
    return net


# ------------------------------------------------------------- InceptionV3

def inception3():
    """Inception-v3 as Keras builds it: 299x299 input, convolutions without
    bias, batch-norm with a shift only (scale=False), no auxiliary head.
    The published 23.8 M counts these trainable parameters."""
    net = Net("inception3", "InceptionV3")

    def cbn(name, cin, cout, kh, kw, size):
        w = size if isinstance(size, int) else size[1]
        h = size if isinstance(size, int) else size[0]
        net.conv(name, cin, cout, kh, kw, h, w, bn=1)

    # Stem: 299 -> 149 -> 147 -> 147 -> pool 73 -> 73 -> 71 -> pool 35.
    cbn("stem1_3x3s2", 3, 32, 3, 3, 149)
    cbn("stem2_3x3", 32, 32, 3, 3, 147)
    cbn("stem3_3x3", 32, 64, 3, 3, 147)
    cbn("stem4_1x1", 64, 80, 1, 1, 73)
    cbn("stem5_3x3", 80, 192, 3, 3, 71)

    def block_a(i, cin, pool):                      # 35x35
        m = f"mixed{i}_"
        cbn(m + "1x1", cin, 64, 1, 1, 35)
        cbn(m + "5x5_1", cin, 48, 1, 1, 35)
        cbn(m + "5x5_2", 48, 64, 5, 5, 35)
        cbn(m + "dbl_1", cin, 64, 1, 1, 35)
        cbn(m + "dbl_2", 64, 96, 3, 3, 35)
        cbn(m + "dbl_3", 96, 96, 3, 3, 35)
        cbn(m + "pool", cin, pool, 1, 1, 35)
        return 64 + 64 + 96 + pool

    c = block_a(0, 192, 32)
    c = block_a(1, c, 64)
    c = block_a(2, c, 64)
    # mixed3: 35 -> 17
    cbn("mixed3_3x3", c, 384, 3, 3, 17)
    cbn("mixed3_dbl_1", c, 64, 1, 1, 35)
    cbn("mixed3_dbl_2", 64, 96, 3, 3, 35)
    cbn("mixed3_dbl_3", 96, 96, 3, 3, 17)
    c = 384 + 96 + c

    def block_c(i, cin, w):                         # 17x17, factorised 7x7
        m = f"mixed{i}_"
        cbn(m + "1x1", cin, 192, 1, 1, 17)
        cbn(m + "7x7_1", cin, w, 1, 1, 17)
        cbn(m + "7x7_2", w, w, 1, 7, 17)
        cbn(m + "7x7_3", w, 192, 7, 1, 17)
        cbn(m + "dbl_1", cin, w, 1, 1, 17)
        cbn(m + "dbl_2", w, w, 7, 1, 17)
        cbn(m + "dbl_3", w, w, 1, 7, 17)
        cbn(m + "dbl_4", w, w, 7, 1, 17)
        cbn(m + "dbl_5", w, 192, 1, 7, 17)
        cbn(m + "pool", cin, 192, 1, 1, 17)
        return 4 * 192

    for i, w in ((4, 128), (5, 160), (6, 160), (7, 192)):
        c = block_c(i, c, w)
    # mixed8: 17 -> 8
    cbn("mixed8_3x3_1", c, 192, 1, 1, 17)
    cbn("mixed8_3x3_2", 192, 320, 3, 3, 8)
    cbn("mixed8_7x7x3_1", c, 192, 1, 1, 17)
    cbn("mixed8_7x7x3_2", 192, 192, 1, 7, 17)
    cbn("mixed8_7x7x3_3", 192, 192, 7, 1, 17)
    cbn("mixed8_7x7x3_4", 192, 192, 3, 3, 8)
    c = 320 + 192 + c

    def block_e(i, cin):                            # 8x8, expanded filters
        m = f"mixed{i}_"
        cbn(m + "1x1", cin, 320, 1, 1, 8)
        cbn(m + "3x3_1", cin, 384, 1, 1, 8)
        cbn(m + "3x3_2a", 384, 384, 1, 3, 8)
        cbn(m + "3x3_2b", 384, 384, 3, 1, 8)
        cbn(m + "dbl_1", cin, 448, 1, 1, 8)
        cbn(m + "dbl_2", 448, 384, 3, 3, 8)
        cbn(m + "dbl_3a", 384, 384, 1, 3, 8)
        cbn(m + "dbl_3b", 384, 384, 3, 1, 8)
        cbn(m + "pool", cin, 192, 1, 1, 8)
        return 320 + 768 + 768 + 192

    c = block_e(9, c)
    c = block_e(10, c)
    net.fc("predictions", c, 1000)                  # after global pooling
    return net


# ----------------------------------------------------------------- Sockeye

# Vocabulary assumption: the IWSLT'15 English-Vietnamese task as commonly
# preprocessed (source 17,191 words, target 7,709 words), sentences of 25
# tokens on each side on average.  Embeddings are 512 wide.
SOCKEYE = {"src_vocab": 17191, "tgt_vocab": 7709, "embed": 512,
           "hidden": 512, "src_len": 25, "tgt_len": 25}


def lstm(net, name, nin, hidden, steps, dirs=1):
    """An (optionally bidirectional) LSTM layer, MXNet style: i2h and h2h
    weights with a bias each, per direction."""
    per_dir = 4 * hidden * (nin + hidden) + 2 * 4 * hidden
    net.add(name, dirs * per_dir, dirs * steps * 4 * hidden * (nin + hidden))


def sockeye():
    """Sockeye's RNN model: a 2-layer encoder (bidirectional first layer,
    256 units per direction, then a 512-unit layer) and a 2-layer 512-unit
    decoder with MLP attention, input feeding and an output projection."""
    c = SOCKEYE
    net = Net("sockeye", "Sockeye")
    e, h, ts, tt = c["embed"], c["hidden"], c["src_len"], c["tgt_len"]
    net.add("src_embed", c["src_vocab"] * e, 0)     # a lookup: no FLOPs
    lstm(net, "enc_l1_bi", e, h // 2, ts, dirs=2)
    lstm(net, "enc_l2", h, h, ts)
    # Attention: projection of the source states (once per source token),
    # the query projection, scoring and the context (per target step).
    net.add("attention", 2 * h * h + h,
            ts * h * h + tt * (h * h + 2 * ts * h))
    net.add("tgt_embed", c["tgt_vocab"] * e, 0)
    lstm(net, "dec_l1", e + h, h, tt)               # input feeding
    lstm(net, "dec_l2", h, h, tt)
    net.add("att_hidden", 2 * h * h + h, tt * 2 * h * h)
    net.add("output", h * c["tgt_vocab"] + c["tgt_vocab"],
            tt * h * c["tgt_vocab"])
    return net


MODELS = {
    "vgg19": (vgg19, 32, 0.35),
    "resnet50": (resnet50, 32, 0.35),
    "inception3": (inception3, 32, 0.35),
    "sockeye": (sockeye, 64, 0.15),
}


def profile(name):
    """The profile of model @name as a dict (what NAME.json holds)."""
    build, batch, eff = MODELS[name]
    net = build()
    speed = DEVICE["peak_flops"] * eff
    layers = []
    for i, la in enumerate(net.layers):
        layers.append(dict(la, index=i,
                           fwd_s=la["fwd_flops"] * batch / speed,
                           bwd_s=la["bwd_flops"] * batch / speed))
    fwd = sum(la["fwd_s"] for la in layers)
    bwd = sum(la["bwd_s"] for la in layers)
    return {
        "model": name,
        "title": net.title,
        "device": DEVICE["name"],
        "peak_flops": DEVICE["peak_flops"],
        "efficiency": eff,
        "batch": batch,
        "bytes_per_param": 4,
        "assumptions": SOCKEYE if name == "sockeye" else {},
        "params": sum(la["params"] for la in layers),
        "fwd_flops_per_sample": sum(la["fwd_flops"] for la in layers),
        "fwd_s": fwd,
        "bwd_s": bwd,
        "iter_compute_s": fwd + bwd,
        "layers": layers,
    }


def summary(p):
    return (f"{p['title']:<12} {len(p['layers']):4d} layers "
            f"{p['params'] / 1e6:8.2f} M params "
            f"{p['params'] * 4 / 2**20:7.1f} MiB "
            f"{p['fwd_flops_per_sample'] / 1e9:6.2f} GFLOP/sample fwd  "
            f"batch {p['batch']:3d} @ {p['efficiency']:.0%}: "
            f"fwd {p['fwd_s'] * 1e3:6.1f} ms bwd {p['bwd_s'] * 1e3:6.1f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/bench/train/profiles")
    ap.add_argument("--model", action="append", choices=sorted(MODELS))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.model or MODELS:
        p = profile(name)
        with open(os.path.join(args.out, name + ".json"), "w") as f:
            json.dump(p, f, indent=1)
        print(summary(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
