"""Make the demo's subject photos: one distinctive toy (a red ball with a white band and a yellow star) in four
scenes, different sizes and aspect ratios (one smaller than flux-tiny's 256 px data resolution, to show clamping).

    .venv/bin/python examples/make_photos.py      # writes examples/photos/*.png (committed)
"""

from pathlib import Path

from PIL import Image, ImageDraw

OUT = Path(__file__).parent / "photos"
SCENES = [  # (width, height, background, ball centre as fraction, ball radius as fraction of short side)
    (320, 240, (70, 130, 180), (0.45, 0.55), 0.30),
    (300, 300, (60, 150, 70), (0.60, 0.40), 0.25),
    (400, 280, (230, 220, 200), (0.35, 0.50), 0.33),
    (288, 384, (40, 40, 60), (0.50, 0.62), 0.28),
]


def draw_subject(d: ImageDraw.ImageDraw, cx: float, cy: float, r: float) -> None:
    d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=(200, 30, 40), outline=(90, 10, 20), width=3)
    d.rectangle([cx - r * 0.95, cy - r * 0.18, cx + r * 0.95, cy + r * 0.18], fill=(245, 245, 245))
    pts = []
    import math
    for k in range(10):
        rr = r * (0.38 if k % 2 == 0 else 0.16)
        a = -math.pi / 2 + k * math.pi / 5
        pts.append((cx + rr * math.cos(a), cy - r * 0.5 + rr * math.sin(a)))
    d.polygon(pts, fill=(250, 210, 40))


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for i, (w, h, bg, (fx, fy), fr) in enumerate(SCENES):
        im = Image.new("RGB", (w, h), bg)
        d = ImageDraw.Draw(im)
        d.rectangle([0, int(h * 0.75), w, h], fill=tuple(int(c * 0.7) for c in bg))   # a floor
        draw_subject(d, fx * w, fy * h, fr * min(w, h))
        im.save(OUT / f"toy_{i}.png")


if __name__ == "__main__":
    main()
