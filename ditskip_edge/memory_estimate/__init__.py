"""The memory estimate: what a training step needs on a device, predicted from the architecture on fake tensors.

program.py (the step as a program: meta structure, fake or real weights) -> tracker.py (op-level live bytes)
-> memory.py (breakdown and storage) ; split.py (the front / back split for a skip ratio) ; request.py (the estimate
command's request -> JSON document).
"""
