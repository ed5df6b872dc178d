#!/usr/bin/env python3
"""The quickstart's concept detector (tools/base_model/shapes.py, issue 9) on drawn images: it
must call every star of the bundled dataset and freshly drawn stars a star, and no drawn circle,
square or triangle, at every colour pair, position and size — else the concept score in the
README measures nothing.

    test_concept_detector.py SOURCE_DIR
"""
import os
import sys

import numpy as np
from PIL import Image

src = sys.argv[1]
sys.path.insert(0, os.path.join(src, "tools", "base_model"))
import shapes  # noqa: E402

failures = []
rng = np.random.default_rng(123)
for shape in shapes.BASE_SHAPES + (shapes.NEW_SHAPE,):
    for i in range(40):
        image, caption = shapes.random_item(rng, (shape,))
        if shapes.is_star(image) != (shape == shapes.NEW_SHAPE):
            failures.append(f"drawn {caption}: solidity {shapes.solidity(image):.2f}")

stars = os.path.join(src, "datasets", "quickstart-stars")
pngs = sorted(f for f in os.listdir(stars) if f.endswith(".png"))
if len(pngs) < 15:
    failures.append(f"{stars} holds {len(pngs)} images, the quickstart expects about 20")
for name in pngs:
    image = np.asarray(Image.open(os.path.join(stars, name)).convert("RGB"))
    if not shapes.is_star(image):
        failures.append(f"{name}: solidity {shapes.solidity(image):.2f}, not a star")
    with open(os.path.join(stars, name[:-4] + ".txt")) as f:
        if "[trigger]" not in f.read():
            failures.append(f"{name[:-4]}.txt has no [trigger]")

for f in failures:
    print("FAIL", f)
print(f"{4 * 40 + 2 * len(pngs)} checks, {len(failures)} failed")
sys.exit(1 if failures else 0)
