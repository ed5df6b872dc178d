#!/usr/bin/env python3
"""Checks a screenshot of loom's run report (tests/report/test_report_browser.sh): the plots are
drawn, found by the report's fixed palette (src/report/html_report.cpp), each color counted in
exact pixels, which a blank or broken plot does not have.

    check_screenshot.py SCREENSHOT.png NAME=RRGGBB:MIN_PIXELS [...]
Exit 0 when every color has at least its pixels; prints the counts either way.
"""
import sys

from PIL import Image


def main():
    image = Image.open(sys.argv[1]).convert("RGB")
    counts = {}
    for rgb in (image.get_flattened_data() if hasattr(image, "get_flattened_data") else image.getdata()):
        counts[rgb] = counts.get(rgb, 0) + 1
    failed = False
    for spec in sys.argv[2:]:
        name, rest = spec.split("=")
        color, minimum = rest.split(":")
        rgb = tuple(int(color[i:i + 2], 16) for i in (0, 2, 4))
        n = counts.get(rgb, 0)
        ok = n >= int(minimum)
        failed |= not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {n} pixels of #{color} (at least {minimum})")
    non_white = sum(n for rgb, n in counts.items() if rgb != (255, 255, 255))
    print(f"     {non_white} of {image.width * image.height} pixels are not white")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
