"""The subject stage on the device (issue 15): photos -> schedule -> patches -> encode program -> x0 -> the skipped
blocks' forward programs -> residuals -> the bundle's codec -> cache, with the runtime package alone.

Properties protected:
- the runtime's numpy twins are the host's arithmetic: crop_patch is PatchSampler (<= 1e-6), the numpy codecs give
  the host encoders' codes bit for bit (lowrank: the same residual to rounding);
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ditskip_edge.runtime.cache_format import TensorCodec


@pytest.mark.parametrize("hw,out,box", [((240, 320), 64, (10, 20, 160)), ((100, 120), 32, (17, 9, 32)),
                                        ((512, 683), 256, (100, 0, 512)), ((77, 91), 32, (5, 7, 64)),
                                        ((64, 80), 32, (3, 5, 48))])
def test_numpy_crop_patch_is_the_patch_sampler(hw, out, box):
    from ditskip_edge.patch_sampling import PatchSampler
    from ditskip_edge.runtime.patches import crop_patch
    img = np.random.RandomState(sum(hw)).uniform(-1, 1, (3, *hw)).astype(np.float32)
    ref = PatchSampler(out)(torch.from_numpy(img)[None], torch.tensor(box, dtype=torch.float32)).numpy()
    got = crop_patch(img, box, out)
    assert got.shape == ref.shape == (1, 3, out, out)
    assert np.abs(got - ref).max() <= 1e-6


@pytest.mark.parametrize("spec", ["fp32", "fp16", "int8-token", "int8-channel", "int8-g32", "int8-t16", "int4-g32",
                                  "int4-t8", "lowrank-r8"])
def test_numpy_codecs_are_the_host_encoders(spec):
    from ditskip_edge.cache import codecs as host
    from ditskip_edge.runtime import codecs as device
    d = (np.random.RandomState(0).randn(1, 64, 96) * np.linspace(0.1, 3, 96)).astype(np.float32)
    c = TensorCodec.parse(spec)
    ref = {k: v.numpy() for k, v in host.encode_tensor(c, torch.from_numpy(d)).items()}
    got = device.encode_tensor(c, d)
    assert set(got) == set(ref) and all(got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape for k in ref)
    ref_dec = host.decode_tensor(c, {k: torch.from_numpy(v) for k, v in ref.items()}, d.shape).numpy()
    if c.kind == "lowrank":      # numpy's SVD: the same reconstruction to rounding, codes may differ by one step
        assert np.abs(device.decode_tensor(c, got, d.shape) - ref_dec).max() <= 1e-3 * np.abs(ref_dec).max()
    else:
        assert all(np.array_equal(got[k], ref[k]) for k in ref)
    dec = device.decode_tensor(c, ref, d.shape)                               # the same codes decode alike
    assert np.array_equal(dec, ref_dec) if c.kind != "lowrank" else np.allclose(dec, ref_dec, rtol=1e-5, atol=1e-6)
