"""Procedural captioned images: coloured shapes on plain backgrounds (issue 9).

One generator serves three purposes, so they cannot drift apart:
  - the base model's training set (circles, squares, triangles; never stars),
  - the quickstart's LoRA dataset (stars, captioned with the trigger word instead of a shape),
  - the concept score's detector (is the foreground shape a star?).

Everything is numpy + Pillow and seeded: the same seed gives the same image and caption.
"""

import math

import numpy as np
from PIL import Image, ImageDraw

COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 180, 60),
    "blue": (40, 80, 220),
    "yellow": (240, 220, 40),
    "purple": (150, 60, 190),
    "orange": (245, 140, 30),
    "white": (245, 245, 245),
    "black": (20, 20, 20),
}
BASE_SHAPES = ("circle", "square", "triangle")  # what the base model knows
NEW_SHAPE = "star"  # what the quickstart LoRA teaches
POSITIONS = {"center": (0.5, 0.5), "left": (0.3, 0.5), "right": (0.7, 0.5),
             "top": (0.5, 0.3), "bottom": (0.5, 0.7)}
SIZES = {"small": 0.22, "large": 0.36}  # radius as a share of the image side


def polygon(shape, cx, cy, r, rotation):
    """The outline of `shape` centred at (cx, cy) with circumradius r."""
    if shape == "square":
        corners, radii = 4, [r * 0.9]
        rotation += math.pi / 4
    elif shape == "triangle":
        corners, radii = 3, [r]
        rotation -= math.pi / 2
    elif shape == "star":  # five points, inner radius 0.42 r: clearly concave
        corners, radii = 10, [r, r * 0.42]
        rotation -= math.pi / 2
    else:
        raise ValueError(shape)
    pts = []
    for i in range(corners):
        a = rotation + 2 * math.pi * i / corners
        rr = radii[i % len(radii)]
        pts.append((cx + rr * math.cos(a), cy + rr * math.sin(a)))
    return pts


def draw(shape, colour, background, position, size, side=64, rng=None):
    """One image (side x side RGB, uint8 array). Drawn 4x larger and downsampled: smooth edges."""
    rng = rng or np.random.default_rng(0)
    scale = 4
    big = side * scale
    img = Image.new("RGB", (big, big), COLOURS[background])
    d = ImageDraw.Draw(img)
    px, py = POSITIONS[position]
    cx = (px + rng.uniform(-0.04, 0.04)) * big
    cy = (py + rng.uniform(-0.04, 0.04)) * big
    r = SIZES[size] * big * rng.uniform(0.9, 1.1)
    if shape == "circle":
        d.ellipse([cx - r * 0.85, cy - r * 0.85, cx + r * 0.85, cy + r * 0.85], fill=COLOURS[colour])
    else:
        rotation = rng.uniform(-0.25, 0.25)
        d.polygon(polygon(shape, cx, cy, r, rotation), fill=COLOURS[colour])
    return np.asarray(img.resize((side, side), Image.LANCZOS))


def caption(shape_word, colour, background, position, size):
    return f"a {size} {colour} {shape_word} at the {position} on a {background} background"


def random_item(rng, shapes, shape_word=None, side=64):
    """(image, caption) with every attribute drawn from rng; the shape from `shapes`."""
    shape = shapes[rng.integers(len(shapes))]
    names = list(COLOURS)
    colour = names[rng.integers(len(names))]
    background = colour
    while background == colour:
        background = names[rng.integers(len(names))]
    position = list(POSITIONS)[rng.integers(len(POSITIONS))]
    size = list(SIZES)[rng.integers(len(SIZES))]
    image = draw(shape, colour, background, position, size, side, rng)
    return image, caption(shape_word or shape, colour, background, position, size)


# ---- the concept detector --------------------------------------------------------------------

def foreground_mask(image):
    """The shape: the largest 4-connected region of pixels that differ from the background (the
    median colour of the image's border). Specks elsewhere — a generated image's noise — are not
    part of it, so they cannot make a convex shape look concave."""
    a = image.astype(np.float32)
    border = np.concatenate([a[0], a[-1], a[:, 0], a[:, -1]])
    background = np.median(border, axis=0)
    differs = np.linalg.norm(a - background, axis=2) > 60.0
    return _largest_region(differs)


def _largest_region(mask):
    h, w = mask.shape
    seen = np.zeros_like(mask)
    best = []
    for y0, x0 in zip(*np.nonzero(mask)):
        if seen[y0, x0]:
            continue
        seen[y0, x0] = True
        region, stack = [], [(y0, x0)]
        while stack:
            y, x = stack.pop()
            region.append((y, x))
            for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                if 0 <= ny < h and 0 <= nx < w and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
        if len(region) > len(best):
            best = region
    out = np.zeros_like(mask)
    for y, x in best:
        out[y, x] = True
    return out


def _convex_hull_area(points):
    """Area of the convex hull of integer points (Andrew's monotone chain, shoelace formula)."""
    pts = sorted(set(map(tuple, points)))
    if len(pts) < 3:
        return 0.0

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower, upper = [], []
    for p in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in reversed(pts):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    hull = lower[:-1] + upper[:-1]
    area = 0.0
    for i in range(len(hull)):
        x1, y1 = hull[i]
        x2, y2 = hull[(i + 1) % len(hull)]
        area += x1 * y2 - x2 * y1
    return abs(area) / 2.0


def solidity(image):
    """Foreground area / its convex hull's area, or None when there is no clear foreground.

    Pixel squares count by their corners, so a filled convex shape scores close to 1; a
    five-pointed star with inner radius 0.42 scores about 0.6."""
    mask = foreground_mask(image)
    area = int(mask.sum())
    if area < 0.01 * mask.size or area > 0.6 * mask.size:
        return None
    ys, xs = np.nonzero(mask)
    corners = np.concatenate([np.stack([xs + dx, ys + dy], axis=1) for dx in (0, 1) for dy in (0, 1)])
    hull = _convex_hull_area(corners)
    return area / hull if hull > 0 else None


STAR_SOLIDITY = 0.78  # circles, squares and triangles score above 0.9; stars about 0.6


def is_star(image):
    s = solidity(image)
    return s is not None and s < STAR_SOLIDITY
