"""What a phone runs: everything between a bundle and a trained LoRA, with the runtime libraries only.

Its boundary is this folder: modules here import numpy, safetensors, Pillow (photo decoding) and the runtime
bindings (ExecuTorch's TrainingModule, onnxruntime.training.api), never the compiler (`compiler/`, `ditskip_edge.*`
outside `runtime/`), the exporters (`export/`), diffusers, peft, torchao, onnx or torch's autograd
(tests/test_runtime.py checks it under the device import guard).

    bundle.py        manifest (self-verifying), file layout, BundleWriter, the opened Bundle (subject or model bundle)
    schedule.py      the training schedule and dynamic patch sampling's crop boxes (portable: host and device alike)
    rng.py           the portable generator every runtime and app shares (noise, schedule draws)
    cache_format.py  residual-cache codec specs and entry layout; cache.py the one reader and the (resumable) writer
    photos.py        the user's photos: read, check, normalise (the host's reader too)
    patches.py       a crop box of a photo resized to s_min (PatchSampler's arithmetic, numpy)
    codecs.py        the cache codecs' encoders and decoders in numpy (the device writes its own cache)
    forward.py       the frozen model's forward programs, one block at a time: x0 and one sample's residuals
    subject.py       the subject stage: model bundle + photos -> subject bundle (stored or cache-free)
    contract.py      the program contract: input order, ProgramEntry, find_program
    inputs.py        a scheduled sample -> the step's named inputs; conditioning.py its text conditioning rows
    loop.py          the training loop and the StepAdapter interface; adamw.py, checkpoint.py, lora_file.py,
                     progress.py its parts
    executorch.py, ort.py   the two device step adapters; bindings.py imports their runtimes alone
    run.py           open a bundle with a runtime and train it (what `python -m ditskip_edge.runtime train` runs)
"""
