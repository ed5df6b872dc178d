"""Generated training images for the benchmarks: a coloured square on a plain background, with a
caption sidecar, as the C++ tests write them (tests/train/tiny_sd.h)."""

import os

import numpy as np
from PIL import Image


def add_images(folder, count, size, first=0):
    """Images first..first+count-1 of size x size pixels (img<i>.png + img<i>.txt)."""
    os.makedirs(folder, exist_ok=True)
    for i in range(first, first + count):
        img = np.zeros((size, size, 3), np.uint8)
        img[...] = (25 * i % 256, 90, 160)
        q = size // 4
        img[q:3 * q, q:3 * q] = (220, 40, 30 * i % 256)
        Image.fromarray(img).save(os.path.join(folder, f"img{i}.png"))
        with open(os.path.join(folder, f"img{i}.txt"), "w") as f:
            f.write(f"a red square, picture {i}")
