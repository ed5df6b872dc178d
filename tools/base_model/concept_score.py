"""The quickstart's concept score (issue 9): how often the trigger prompt draws a star.

Method: N prompts "a large <colour> zxq at the <position> on a <background> background" (colours,
positions and backgrounds drawn with a fixed seed, each prompt with its own sampling seed) are
rendered by `loom sample` with the base model alone and with the LoRA; each image's foreground
(pixels far from the colour of its border) is measured by its solidity — area over convex-hull
area (shapes.py). Filled circles, squares and triangles score above 0.85, a five-pointed star
about 0.6; an image counts as a star when its solidity is below 0.78. The score is the share of
images that are stars. As a control, the same is done for the word "circle" in place of the
trigger: the LoRA must not turn everything into stars.

    .venv/bin/python tools/base_model/concept_score.py LOOM MODEL LORA [N] [WORKDIR]
"""

import os
import subprocess
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shapes  # noqa: E402


def prompts(word, n, seed=11):
    rng = np.random.default_rng(seed)
    names = list(shapes.COLOURS)
    out = []
    for _ in range(n):
        colour = names[rng.integers(len(names))]
        background = colour
        while background == colour:
            background = names[rng.integers(len(names))]
        position = list(shapes.POSITIONS)[rng.integers(len(shapes.POSITIONS))]
        out.append(f"a large {colour} {word} at the {position} on a {background} background")
    return out


def render(loom, model, lora, texts, out):
    os.makedirs(out, exist_ok=True)
    cmd = [loom, "sample", "--model", model, "--width", "64", "--height", "64", "--steps", "25",
           "--guidance", "5", "--seed", "1000", "--out", out]
    if lora:
        cmd += ["--lora", lora]
    for t in texts:
        cmd += ["--prompt", t]
    subprocess.run(cmd, check=True, capture_output=True)
    files = sorted((f for f in os.listdir(out) if f.endswith(".png")),
                   key=lambda f: int(f.split("_")[-1].split(".")[0]))
    return [np.asarray(Image.open(os.path.join(out, f)).convert("RGB")) for f in files]


def score(images):
    return sum(shapes.is_star(i) for i in images) / len(images)


def main():
    loom, model, lora = sys.argv[1:4]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 32
    work = sys.argv[5] if len(sys.argv) > 5 else "output/concept_score"
    rows = []
    for word in ("zxq", "circle"):
        texts = prompts(word, n)
        for name, l in (("base", None), ("base + LoRA", lora)):
            images = render(loom, model, l, texts, os.path.join(work, word, name.replace(" ", "")))
            rows.append((word, name, score(images)))
    print(f"concept score: share of {n} samples that are stars (solidity < {shapes.STAR_SOLIDITY})")
    print(f"{'prompt word':<12} {'model':<12} {'stars':>6}")
    for word, name, s in rows:
        print(f"{word:<12} {name:<12} {s:>6.2f}")


if __name__ == "__main__":
    main()
