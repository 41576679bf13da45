"""The personalization testbed: a small pretrained text-to-image FLUX (`flux-testbed`), the generated scenes it was
pretrained on, held-out subjects it never saw, fidelity metrics that need no download, and sampling.

    scenes.py    captioned scene generator (pretraining data) and the held-out subjects with their prompts
    metrics.py   subject fidelity (fixed embedder + colour / shape agreement) and prompt fidelity (background)
    sampling.py  rectified-flow Euler generation through the full model's view, with a LoRA file loaded
    study.py     personalize every held-out subject with each method, generate, score (benchmarks/ runs it)
"""
