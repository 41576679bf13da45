"""The personalization testbed: a small pretrained text-to-image FLUX (`flux-testbed`, defined in
`ditskip_edge/models/specs.py`, weights in `ditskip_edge/assets/`), the generated scenes it was pretrained on, held-out subjects it never saw, and fidelity metrics that need no download
(generation with a LoRA is `ditskip_edge/generate.py`).

    scenes.py    captioned scene generator (pretraining data) and the held-out subjects with their prompts
    metrics.py   subject fidelity (fixed embedder + colour / shape agreement) and prompt fidelity (background)
    study.py     personalize every held-out subject with each method, generate, score (experiments/personalization_study.py runs it)
    grow.py      a deeper testbed from the pretrained one: new blocks inserted as zero-gated copies (the identity)
    instrument.py  the planted-subject instrument (teacher, velocity and sample progress)
    finetune.py  the research fine-tuning loop the instrument and the ceiling experiment use
    pretrain_testbed.py, gpu_payload.py   pretraining the testbed (on the CPU, or on a lent GPU)
    experiments/ the scripts that ran the testbed's experiments; their results are in results/ (README.md)
"""
