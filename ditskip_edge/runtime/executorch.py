"""The ExecuTorch step adapter: a bundle's `train_step` program (a joint forward-backward .pte) under the loop.

    module = TrainingModule(_load_for_executorch(program, data_path=ptd))   # ExecuTorch's TrainingModule; the
                                                                # frozen weights' .ptd (the entry's `data`)
                                                                # memory-mapped, not locked
    loss = module.forward_backward("forward", inputs)[0]        # inputs in contract order (runtime/contract.py)
    module.named_parameters() / named_gradients()               # alias the runtime's memory; exist after one call

Gradients are outputs of the joint graph, overwritten by every call: the adapter sums g / grad_accum itself.
The parameters are updated in place by the loop's AdamW (numpy views of the runtime's parameter memory).

`Preprocessor`: x0 on the device from the photo and the crop box (the bundle's `preprocess` programs, one per
photo size), for `train --device-preprocess`.
"""

from __future__ import annotations

import numpy as np

from . import bindings
from .bundle import Bundle
from .contract import METHOD, PREPROCESS, ordered_inputs
from .errors import BundleError
from .footprint import mlock_refused
from .inputs import NamedInputs
from .program_step import ProgramStep
from .schedule import Sample


class ExecutorchStep(ProgramStep):
    runtime = "executorch"

    def __init__(self, bundle: Bundle, precision: str | None = None):
        import torch                     # ExecuTorch's Python bindings take torch tensors (no autograd is used)
        super().__init__(bundle, precision)
        self._torch = torch
        self.module = load_training_module(bundle, self.program)

    def _forward_backward(self, inputs: NamedInputs) -> float:
        tensors = [self._torch.from_numpy(a) for a in ordered_inputs(self.program, inputs)]
        with mlock_refused():            # the first call loads the methods: the mapped constants stay unlocked
            return float(self.module.forward_backward(METHOD, tensors)[0])

    def prepare(self, example: NamedInputs) -> None:
        if self._params is None:
            self._forward_backward(example)
            self._params = {n: t.numpy() for n, t in self.module.named_parameters().items()}
            if set(self._params) != set(self.names):
                raise BundleError(f"{self.program['path']}: trainable parameters {sorted(self._params)[:3]}.. do not "
                                  f"match the manifest's {sorted(self.names)[:3]}..")

    def accumulate(self, inputs: NamedInputs, grad_accum: int) -> float:
        loss = self._forward_backward(inputs)
        for n, g in self.module.named_gradients().items():
            self._grads[n] += g.numpy() / np.float32(grad_accum)
        return loss / grad_accum


def load_training_module(bundle: Bundle, program: dict):
    """The program's TrainingModule: the .pte and, when the entry lists one in `data`, its .ptd data file. Both are
    memory-mapped by ExecuTorch's MmapDataLoader; mlock is refused while loading (runtime/footprint.py), so the
    mapped frozen weights stay clean file-backed pages the system may drop, as a phone app's Module maps them."""
    data = list(program.get("data", []))
    if len(data) > 1:
        raise BundleError(f"{bundle.root}: executorch program {program['path']} lists {len(data)} data files; "
                          f"expected at most one .ptd")
    if data and not data[0].endswith(".ptd"):
        raise BundleError(f"{bundle.root}: executorch program {program['path']}: data file {data[0]} is not a .ptd")
    load = bindings.executorch_inference()._load_for_executorch
    with mlock_refused():
        if data:
            module = load(str(bundle.root / program["path"]), data_path=str(bundle.root / data[0]))
        else:
            module = load(str(bundle.root / program["path"]))
    return bindings.training_module(module)


class Preprocessor:
    """x0 for a sample on the device: the `preprocess` program for the photo's size (patch crop + encoder)."""

    def __init__(self, bundle: Bundle):
        self.bundle = bundle
        self.photos = bundle.field("subject_stage", "photos")
        self._load = bindings.executorch_inference()._load_for_executorch
        self.modules: dict[tuple[int, int], object] = {}

    def photo_pixels(self, photo: int) -> np.ndarray:
        """[1, 3, H, W] float32 in [-1, 1], decoded from the bundle's PNG as the compiler normalised it."""
        from PIL import Image
        with Image.open(self.bundle.root / self.photos[photo]) as im:
            arr = np.asarray(im.convert("RGB"), dtype=np.float32) / 127.5 - 1.0
        return np.ascontiguousarray(arr.transpose(2, 0, 1)[None])

    def __call__(self, sample: Sample) -> np.ndarray:
        import torch
        pixels = self.photo_pixels(sample.photo)
        hw = tuple(pixels.shape[2:])
        if hw not in self.modules:
            progs = [p for p in self.bundle.programs if p.get("name") == PREPROCESS and p.get("runtime") == "executorch"
                     and tuple(p["inputs"][0]["shape"][2:]) == hw]
            if not progs:
                raise BundleError(f"{self.bundle.root}: no executorch preprocess program for photos of {list(hw)} px "
                                  f"(compile with --runtime executorch)")
            self.modules[hw] = self._load(str(self.bundle.root / progs[0]["path"]))
        out = self.modules[hw].forward((torch.from_numpy(pixels), torch.tensor(sample.crop_box, dtype=torch.float32)))
        return out[0].numpy()
