#!/usr/bin/env python3
"""The ResNet of examples/resnet in PyTorch (CPU), as a peer for `hetex resnet`'s
images/s: a 3x3 stem, three stages of basic blocks (widths w, 2w, 4w; a 1x1
strided conv with batch norm on a shortcut that changes shape), global average
pooling, a linear layer; SGD with Nesterov momentum 0.9, weight decay 5e-4 on
the weights, on the first --images Fashion-MNIST training images. Prints one
JSON object (bench "resnet_torch") with the training images/s.

    python3 bench/resnet_torch.py [--width 16] [--blocks 1] [--batch 128] [--images 2560] [--threads 2]
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def conv_bn(cin, cout, k, stride):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1, self.c2 = conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3, 1)
        self.short = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x):
        return F.relu(self.c2(F.relu(self.c1(x))) + self.short(x))


class ResNet(nn.Module):
    def __init__(self, width, blocks):
        super().__init__()
        layers, cin = [conv_bn(1, width, 3, 1), nn.ReLU()], width
        for s in range(3):
            for k in range(blocks):
                layers.append(Block(cin, width << s, 2 if s and not k else 1))
                cin = width << s
        self.body, self.fc = nn.Sequential(*layers), nn.Linear(cin, 10)

    def forward(self, x):
        return self.fc(self.body(x).mean((2, 3)))


def idx(path, header):
    return np.fromfile(path, dtype=np.uint8)[header:]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/fashion-mnist")
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--blocks", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--images", type=int, default=2560)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    x = idx(f"{a.data}/train-images-idx3-ubyte", 16)[: a.images * 784].reshape(-1, 1, 28, 28)
    y = idx(f"{a.data}/train-labels-idx1-ubyte", 8)[: a.images]
    x = (torch.from_numpy(x.astype(np.float32)) / 255 - 0.2860) / 0.3530
    y = torch.from_numpy(y.astype(np.int64))
    model = ResNet(a.width, a.blocks)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    rest = [p for n, p in model.named_parameters() if p.ndim <= 1]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4}, {"params": rest}], lr=0.05,
                          momentum=0.9, nesterov=True)
    steps = a.images // a.batch
    t0, loss = None, float("nan")
    for k in range(steps + 1):  # step 0 warms up and is not timed
        if k == 1:
            t0 = time.perf_counter()
        i = (k % steps) * a.batch
        out = model(x[i : i + a.batch])
        l = F.cross_entropy(out, y[i : i + a.batch])
        opt.zero_grad()
        l.backward()
        opt.step()
        loss = l.item()
    dt = time.perf_counter() - t0
    print(json.dumps({"bench": "resnet_torch", "width": a.width, "blocks": a.blocks,
                      "batch": a.batch, "steps": steps, "threads": a.threads,
                      "images_per_s": round(steps * a.batch / dt, 1), "last_loss": round(loss, 4),
                      "torch": torch.__version__, "load1": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
