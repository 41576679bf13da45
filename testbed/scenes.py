"""Generated captioned scenes: one object (shape, colour, texture, size, placement) on a plain background.

Pretraining draws from PALETTE x SHAPES x TEXTURES x SIZES x PLACES (INNER_SHARE of the objects with a centre of
another colour, "a red square with a blue centre": 0.25 in the first three stages of the committed weights'
pretraining, 0 in the last, testbed/results/pretrain/); half the captions name every attribute, e.g.
"a large red striped circle on the left, on a blue background", the other half leave some out ("a star in the
center"), so a prompt that does not name the colour or the background is one the model knows. Images are rendered
at 64 px (2x supersampled), float32 [3, 64, 64] in [-1, 1].

Held-out subjects (SUBJECTS) are DreamBooth-like: each is a new *instance* of a class the model knows. Its shape
(heart, star, bowtie, crescent) and its colour (pink, teal, brown, cyan) each occur in pretraining, but never together
(HELD_OUT_PAIRS: no pink heart, no teal star, ... is ever drawn); two have details pretraining never draws (white dots
on pink, cyan stripes on brown); the star's orange centre and the crescent's dark checks are attributes pretraining
drew on other objects (until its last stage). 5 reference photos each (varied size and placement, on 5 backgrounds, as
DreamBooth photos vary), trained with one prompt "a large sks <shape> in the center" (DreamBooth's identifier + the
class noun) and evaluated with "... , on a <colour> background" for 4 backgrounds no reference shows. Before 2026-12
the subjects' shapes and colours were both absent from pretraining ("a sks cross" for a star) and the references were
all on white: a LoRA drew fragments, and even a 1500-step fine-tune of every weight drew the star on 1 of the 4 other
backgrounds (testbed/results/fidelity.md).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

RGB = tuple[int, int, int]
SCENE_PX = 64

PALETTE: dict[str, RGB] = {
    "red": (215, 40, 40), "green": (40, 165, 60), "blue": (40, 80, 215), "yellow": (240, 210, 40),
    "purple": (135, 55, 175), "orange": (245, 135, 25), "white": (238, 238, 238), "black": (22, 22, 22),
    "pink": (250, 110, 185), "teal": (0, 160, 160), "brown": (140, 80, 35), "cyan": (60, 215, 240),
}
SHAPES = ("circle", "square", "triangle", "cross", "ring", "bar", "heart", "star", "bowtie", "crescent")
INNER_SHARE = 0.0                  # objects with a centre of another colour ("with an orange centre"); see above
HELD_OUT_PAIRS = {("heart", "pink"), ("star", "teal"), ("bowtie", "brown"), ("crescent", "cyan")}   # the subjects
TEXTURES = ("plain", "striped", "dotted", "checkered")
SIZES = {"small": 10.0, "large": 17.0}            # half-extent in px at 64 px
PLACES = {"in the center": (0.5, 0.5), "on the left": (0.28, 0.5), "on the right": (0.72, 0.5),
          "at the top": (0.5, 0.28), "at the bottom": (0.5, 0.72)}


def _grid(px: int, ss: int = 2) -> tuple[np.ndarray, np.ndarray]:
    c = (np.arange(px * ss) + 0.5) / ss
    return np.meshgrid(c, c)     # x, y in pixel units


def shape_mask(shape: str, x: np.ndarray, y: np.ndarray, cx: float, cy: float, r: float) -> np.ndarray:
    u, v = (x - cx) / r, (y - cy) / r            # unit coordinates, v down
    if shape == "circle":
        return u * u + v * v <= 1
    if shape == "square":
        return (np.abs(u) <= 0.85) & (np.abs(v) <= 0.85)
    if shape == "triangle":
        return (v <= 0.85) & (v >= -0.95 + 2 * np.abs(u) * 0.95)
    if shape == "cross":
        return ((np.abs(u) <= 0.3) & (np.abs(v) <= 1)) | ((np.abs(v) <= 0.3) & (np.abs(u) <= 1))
    if shape == "ring":
        d = u * u + v * v
        return (d <= 1) & (d >= 0.45)
    if shape == "bar":
        return (np.abs(u) <= 1) & (np.abs(v) <= 0.38)
    if shape == "heart":
        a, b = u * 1.15, -(v * 1.15) + 0.25
        return (a * a + b * b - 1) ** 3 - a * a * b ** 3 <= 0
    if shape == "star":
        ang = np.arctan2(v, u) + np.pi / 2
        rad = np.sqrt(u * u + v * v)
        k = np.abs(((ang / (2 * np.pi / 5)) % 1) - 0.5) * 2          # 1 at the points, 0 between
        return rad <= 0.45 + 0.6 * k ** 1.5
    if shape == "bowtie":
        return (np.abs(v) <= np.abs(u) * 0.95 + 0.12) & (np.abs(u) <= 1) & (np.abs(v) <= 0.9)
    if shape == "crescent":
        return (u * u + v * v <= 1) & ((u - 0.45) ** 2 + (v + 0.15) ** 2 > 0.72 ** 2)
    raise ValueError(f"unknown shape {shape!r}")


def texture_mask(texture: str, x: np.ndarray, y: np.ndarray, cx: float, cy: float, r: float) -> np.ndarray:
    """Where the texture's second colour goes (inside the object)."""
    if texture == "plain":
        return np.zeros_like(x, dtype=bool)
    period = max(r / 2.2, 3.0)
    if texture == "striped":
        return ((y - cy) / period) % 1.0 < 0.5
    if texture == "dotted":
        du, dv = ((x - cx) / period) % 1.0 - 0.5, ((y - cy) / period) % 1.0 - 0.5
        return du * du + dv * dv < 0.08
    if texture == "checkered":
        return ((np.floor((x - cx) / period) + np.floor((y - cy) / period)) % 2) == 0
    raise ValueError(f"unknown texture {texture!r}")


def second_colour(rgb: RGB) -> RGB:
    """Texture colour: a dark version of light colours, a light version of dark ones."""
    lum = 0.3 * rgb[0] + 0.59 * rgb[1] + 0.11 * rgb[2]
    return tuple(int(c * 0.35) for c in rgb) if lum > 110 else tuple(int(c + (255 - c) * 0.6) for c in rgb)


@dataclass(frozen=True)
class Scene:
    shape: str
    colour: RGB
    texture: str
    texture_colour: RGB
    background: RGB
    centre: tuple[float, float]        # fraction of the image side
    half_extent_px: float              # at SCENE_PX
    inner: tuple[str, RGB, float] | None = None   # optional centred inner shape (shape, colour, relative size)


def render(scene: Scene, px: int = SCENE_PX, rng: np.random.Generator | None = None) -> torch.Tensor:
    """Scene -> [3, px, px] float32 in [-1, 1] (2x supersampled, mild pixel noise when rng is given)."""
    ss = 2
    x, y = _grid(px, ss)
    s = px / SCENE_PX
    cx, cy, r = scene.centre[0] * px, scene.centre[1] * px, scene.half_extent_px * s
    img = np.empty(x.shape + (3,), np.float32)
    img[:] = scene.background
    obj = shape_mask(scene.shape, x, y, cx, cy, r)
    tex = texture_mask(scene.texture, x, y, cx, cy, r) & obj
    img[obj] = scene.colour
    img[tex] = scene.texture_colour
    if scene.inner is not None:
        ishape, icol, isize = scene.inner
        img[shape_mask(ishape, x, y, cx, cy, r * isize) & obj] = icol
    img = img.reshape(px, ss, px, ss, 3).mean((1, 3))
    if rng is not None:
        img = img + rng.normal(0, 3.0, img.shape)
    out = torch.from_numpy(np.clip(img, 0, 255).astype(np.float32) / 127.5 - 1.0)
    return out.permute(2, 0, 1).contiguous()


OBJECT_REGION_SCALE = 1.4          # the object region's radius / the half-extent (the farthest shape corner: a bowtie's, 1.35)


def object_region(scene: Scene, px: int = SCENE_PX) -> torch.Tensor:
    """[1, px, px] float32 in [0, 1]: coverage of the disc of radius OBJECT_REGION_SCALE x the object's half-extent
    around its centre (2x supersampled, as `render`). It holds every scene shape drawn there, inside and just
    outside it, so it is where one shape's pixels differ from another's: the pixels a shape word decides."""
    ss = 2
    x, y = _grid(px, ss)
    s = px / SCENE_PX
    cx, cy, r = scene.centre[0] * px, scene.centre[1] * px, scene.half_extent_px * s * OBJECT_REGION_SCALE
    disc = ((x - cx) ** 2 + (y - cy) ** 2 <= r * r).astype(np.float32)
    return torch.from_numpy(disc.reshape(px, ss, px, ss).mean((1, 3)))[None]


# -------------------------------------------------------------------------------------------- pretraining data
MARKING_WORDS = {"striped": "stripes", "dotted": "dots", "checkered": "checks"}   # "with white dots"


@dataclass(frozen=True)
class SceneDomain:
    """What pretraining draws beyond shape x colour x texture x size x place x background.

    inner_share: the share of objects with a centre of another colour ("a red square with a blue centre").
    marking_share: the share of textured objects whose texture is in a palette colour of its own, named as the
      marking ("a pink square with white dots", "a brown bar with cyan stripes"), instead of `second_colour`'s dark
      or light version of the object's colour ("a pink dotted square"). Real text-to-image models know "white polka
      dots" on anything; with 0 (the committed weights' pretraining) a subject's white dots on pink are a detail the
      model has never drawn on any object (`pretrain_testbed.py --marking-share`; what 65 CPU minutes of it
      did, for prompts and for the demo: testbed/results/marking_domain.md).
    instance_share: the share of scenes that are one of INSTANCES, a fixed object (shape, colour and marking) named
      by a made-up word as DreamBooth names a subject, on any background, size and place ("a large pink vex square,
      on a blue background"). Real text-to-image models have seen named things (a brand's logo, a landmark) in
      many contexts; with 0 (the committed weights' pretraining) no word ever stood for one instance, and a LoRA's
      "sks" is the first (`pretrain_testbed.py --instance-share`; what 65 CPU minutes of it did:
      testbed/results/instance_domain.md)."""
    inner_share: float = INNER_SHARE
    marking_share: float = 0.0
    instance_share: float = 0.0

    def validate(self) -> None:
        for name in ("inner_share", "marking_share", "instance_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"SceneDomain.{name} must be in [0, 1], got {getattr(self, name)}")


def pretraining_colour_and_shape(rnd: random.Random) -> tuple[str, str]:
    """A palette colour and a shape drawn together, never a held-out subject's pair (HELD_OUT_PAIRS)."""
    while True:
        colour, shape = rnd.choice(list(PALETTE)), rnd.choice(SHAPES)
        if (shape, colour) not in HELD_OUT_PAIRS:
            return colour, shape


def placed(rnd: random.Random, size: str, place: str, jitter: float = 0.05) -> tuple[tuple[float, float], float]:
    """The object's centre (the place's, jittered) and half-extent (the size's, +-10%) for a pretraining scene."""
    fx, fy = PLACES[place]
    centre = (fx + rnd.uniform(-jitter, jitter), fy + rnd.uniform(-jitter, jitter))
    return centre, SIZES[size] * rnd.uniform(0.9, 1.1)


def random_scene(rnd: random.Random, domain: SceneDomain = SceneDomain()) -> tuple[Scene, str]:
    """A random pretraining scene and its caption. With the default domain the draws (and so every seed's scenes)
    are the ones pretraining always made: the domain's extra draws happen only where its shares are above 0."""
    if domain.instance_share > 0 and rnd.random() < domain.instance_share:
        return instance_scene(rnd.choice(INSTANCES), rnd)
    colour, shape = pretraining_colour_and_shape(rnd)
    bg = rnd.choice([c for c in PALETTE if c != colour])
    texture = rnd.choice(TEXTURES)
    size, place = rnd.choice(list(SIZES)), rnd.choice(list(PLACES))
    centre, r = placed(rnd, size, place)
    inner, centre_words = None, ""
    if rnd.random() < domain.inner_share:          # "with an orange centre": a centred disc of another colour
        ic = rnd.choice([c for c in PALETTE if c not in (colour, bg)])
        inner, centre_words = ("circle", PALETTE[ic], 0.3), f" with a {ic} centre"
    texture_colour, marking_words = second_colour(PALETTE[colour]), ""
    if domain.marking_share > 0 and texture != "plain" and rnd.random() < domain.marking_share:
        mc = rnd.choice([c for c in PALETTE if c != colour])
        texture_colour, marking_words = PALETTE[mc], f" with {mc} {MARKING_WORDS[texture]}"
    scene = Scene(shape, PALETTE[colour], texture, texture_colour, PALETTE[bg], centre, r, inner)
    if marking_words:       # the marking named, no texture adjective; short, to stay within the encoder's tokens
        size_word = f"{size} " if rnd.random() > 0.5 else ""
        return scene, f"a {size_word}{colour} {shape}{marking_words}" + (f", on a {bg} background"
                                                                       if rnd.random() > 0.2 else "")
    tex = "" if texture == "plain" else f" {texture}"
    shape_words = shape + centre_words
    templates = ["a {size} {colour}{tex} {shape} {place}, on a {bg} background",
                 "a {colour}{tex} {shape}, {size}, {place} on a {bg} background",
                 "{bg} background with a {size} {colour}{tex} {shape} {place}"]
    if rnd.random() < 0.5:
        caption = rnd.choice(templates).format(size=size, colour=colour, tex=tex, shape=shape_words, place=place,
                                               bg=bg)
    else:       # attributes left out, as users leave them out: the model learns to fill them in itself
        words = (["a"] + [size] * (rnd.random() > 0.2) + [colour] * (rnd.random() > 0.2)
                 + [texture] * (texture != "plain" and rnd.random() > 0.3) + [shape_words]
                 + [place] * (rnd.random() > 0.3))
        caption = " ".join(words) + (f", on a {bg} background" if rnd.random() > 0.3 else "")
    return scene, caption


@dataclass(frozen=True)
class Instance:
    """One named object of the instance domain: always this shape, colour and marking (a texture in a colour of
    its own, or a centre disc of another colour, as the subjects' markings are)."""
    name: str
    shape: str
    colour: str
    texture: str
    texture_colour: str
    inner: str | None                  # the centre disc's colour, or None

    @property
    def inner_disc(self) -> tuple[str, RGB, float] | None:
        """The centre as `Scene.inner` and `Subject.inner` hold it."""
        return ("circle", PALETTE[self.inner], 0.3) if self.inner else None

    def caption(self, size: str, background: str) -> str:
        """The domain's one caption form (the place left for the model to fill in: the caption stays short)."""
        return f"a {size} {self.colour} {self.name} {self.shape}, on a {background} background"


# Made-up words of two MiniLM word pieces each, as "sks" is ("sk", "##s"), none sharing a piece with it ("xan" and
# "zan" left out: "cyan" is "cy ##an"); a caption of the form below stays within the text encoder's 14 word pieces.
INSTANCE_NAMES = ("vex", "quib", "drel", "fim", "jux", "nox", "plim", "qua", "rix", "tav", "wex", "yip", "brov",
                  "clem", "fenk", "hix", "jom", "kiv", "lut", "mip", "nep", "pem", "rulf", "sav", "tib", "vop", "wub",
                  "yeb", "bax", "cov", "dup", "fep")


def _instances() -> tuple[Instance, ...]:
    rnd = random.Random("instances")
    out = []
    for name in INSTANCE_NAMES:
        colour, shape = pretraining_colour_and_shape(rnd)
        marking = rnd.choice([c for c in PALETTE if c != colour])
        if rnd.random() < 0.25:           # a centre of another colour, as the star's orange centre
            out.append(Instance(name, shape, colour, "plain", colour, marking))
        else:
            out.append(Instance(name, shape, colour, rnd.choice(TEXTURES[1:]), marking, None))
    return tuple(out)


INSTANCES = _instances()


def instance_scene(instance: Instance, rnd: random.Random) -> tuple[Scene, str]:
    """`instance` on a random background (never its own colour), size and place, with `Instance.caption`."""
    bg = rnd.choice([c for c in PALETTE if c != instance.colour])
    size, place = rnd.choice(list(SIZES)), rnd.choice(list(PLACES))
    centre, r = placed(rnd, size, place)
    scene = Scene(instance.shape, PALETTE[instance.colour], instance.texture, PALETTE[instance.texture_colour],
                  PALETTE[bg], centre, r, instance.inner_disc)
    return scene, instance.caption(size, bg)


def random_scenes(n: int, seed: int, domain: SceneDomain = SceneDomain()) -> list[tuple[Scene, str]]:
    """The first n pretraining scenes and captions of `seed` (random_scene drawn n times from one generator)."""
    domain.validate()
    rnd = random.Random(seed)
    return [random_scene(rnd, domain) for _ in range(n)]


# ------------------------------------------------------------------------------------------ held-out subjects
@dataclass(frozen=True)
class Subject:
    name: str
    shape: str
    colour: RGB                        # the subject's main colour (the colour attribute check)
    texture: str
    texture_colour: RGB
    inner: tuple[str, RGB, float] | None
    reference_backgrounds: tuple[str, ...]      # photo i is on background i mod len (never an EVAL_BACKGROUNDS one)
    class_word: str                    # DreamBooth's class noun: the subject's shape, a class the model knows

    @property
    def colour_word(self) -> str:
        """The palette name of the subject's main colour ("teal"): a word the model knows."""
        return next(name for name, rgb in PALETTE.items() if rgb == self.colour)

    @property
    def marking(self) -> RGB:
        """The colour of the detail that makes this instance (its texture's, or its inner shape's): no prompt names
        it (`metrics.marking_present`)."""
        return self.texture_colour if self.texture != "plain" else self.inner[1]

    @property
    def marking_name(self) -> str:
        """What the marking is, in words: "dots", "stripes", "checks" or "centre"."""
        return {"dotted": "dots", "striped": "stripes", "checkered": "checks", "plain": "centre"}[self.texture]

    def scene(self, background: RGB, centre: tuple[float, float], half_extent_px: float) -> Scene:
        return Scene(self.shape, self.colour, self.texture, self.texture_colour, background, centre,
                     half_extent_px, self.inner)


SUBJECTS: dict[str, Subject] = {
    "pink_heart": Subject("pink_heart", "heart", (250, 110, 185), "dotted", (250, 250, 250), None,
                          ("blue", "teal", "brown", "orange", "red"), "heart"),
    "teal_star": Subject("teal_star", "star", (0, 160, 160), "plain", (0, 160, 160), ("circle", (245, 135, 25), 0.3),
                         ("white", "red", "blue", "pink", "brown"), "star"),
    "brown_bowtie": Subject("brown_bowtie", "bowtie", (140, 80, 35), "striped", (90, 230, 230), None,
                            ("white", "red", "blue", "pink", "orange"), "bowtie"),
    "cyan_crescent": Subject("cyan_crescent", "crescent", (60, 215, 240), "checkered", (20, 75, 85), None,
                             ("white", "red", "pink", "brown", "orange"), "crescent"),
}
EVAL_BACKGROUNDS = ("green", "black", "yellow", "purple")


def subject_prompt(subject: Subject, background: str | None = None, described: bool = False) -> str:
    """DreamBooth-style identifier + class noun, in the captions' phrasing. Without `background`: the training
    prompt, one for every reference (as DreamBooth's "a photo of sks dog"); it names no background, because the
    references show several. `described`: the subject's colour word before the identifier, and no size word ("a
    teal sks star in the center"), as a user describes a subject to a model that knows its colour: the word carries
    the colour to backgrounds no reference shows, and the LoRA is left the shape and the details (`make demo`;
    testbed/results/demo_recipe.md). The size word goes to stay within the 14 tokens flux-testbed's text encoder
    reads ("teal" and "sks" are two tokens each; pretraining captions leave the size out one time in five)."""
    where = f", on a {background} background" if background else ""
    if described:
        return f"a {subject.colour_word} sks {subject.class_word} in the center{where}"
    return f"a large sks {subject.class_word} in the center{where}"


def eval_prompts(subject: Subject, described: bool = False) -> list[tuple[str, str]]:
    """(prompt, requested background colour name): the training prompt with a background the references never
    show, so prompt fidelity = that one word realised."""
    return [(subject_prompt(subject, bg, described), bg) for bg in EVAL_BACKGROUNDS]


def reference_background(subject: Subject, i: int) -> str:
    """The background colour name of reference photo i (`reference_images`)."""
    return subject.reference_backgrounds[i % len(subject.reference_backgrounds)]


def reference_captions(subject: Subject, n: int = 5, described: bool = False) -> list[str]:
    """The per-photo captions of `reference_images(subject, n)`: the training prompt naming photo i's background."""
    return [subject_prompt(subject, reference_background(subject, i), described) for i in range(n)]


def reference_images(subject: Subject, n: int = 5, px: int = SCENE_PX, seed: int = 0) -> list[torch.Tensor]:
    """n reference photos of a held-out subject: varied placement and size, the subject's reference backgrounds."""
    rnd = random.Random(f"{subject.name}:{seed}")
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        bg = PALETTE[reference_background(subject, i)]
        centre = (0.5 + rnd.uniform(-0.12, 0.12), 0.5 + rnd.uniform(-0.12, 0.12))
        out.append(render(subject.scene(bg, centre, rnd.uniform(14.0, 19.0)), px, rng))
    return out


def write_reference_photos(subject: Subject, folder, n: int = 5, captions: bool = False,
                           described: bool = False) -> list[torch.Tensor]:
    """`reference_images(subject, n)` as PNGs `folder/00.png ...` (what `compile --images` reads); returns them.
    `captions`: each photo's caption beside it, `folder/00.txt ...` (`compile --photo-captions`): the training prompt
    naming that photo's background (`described`: with the subject's colour word)."""
    from pathlib import Path

    from ditskip_edge.images import to_uint8_image
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    refs = reference_images(subject, n)
    for i, (r, caption) in enumerate(zip(refs, reference_captions(subject, n, described))):
        to_uint8_image(r).save(folder / f"{i:02d}.png")
        if captions:
            (folder / f"{i:02d}.txt").write_text(caption + "\n")
    return refs


def unrelated_image(px: int = SCENE_PX) -> torch.Tensor:
    """An object that shares nothing with any subject: a plain green square on white."""
    return render(Scene("square", PALETTE["green"], "plain", PALETTE["green"], PALETTE["white"], (0.5, 0.5), 16.0),
                  px)
