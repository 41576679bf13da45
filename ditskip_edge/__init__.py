"""ditskip-edge: DiT-BlockSkip fine-tuning compiled for phones.

The host-side compiler is a chain of plain artifacts (STYLE.md):
    model spec -> skip plan -> training schedule -> residual cache -> bundle
each produced by one function of its own module, each saved to and loaded from disk.
"""

__version__ = "0.1.0"
