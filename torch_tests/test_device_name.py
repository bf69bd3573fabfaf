"""torch.tiny.get_device_name() says which backend runs, as torch.cuda.get_device_name does."""

import os

import torch


def test_get_device_name_names_the_backend_tiny_device_chose():
    name = torch.tiny.get_device_name()
    # unset: the first of CUDA and HIP that has a device, else CPU
    backends = [os.environ["TINY_DEVICE"]] if "TINY_DEVICE" in os.environ else ["CUDA", "HIP", "CPU"]
    assert any(name.startswith(f"tiny {b}") for b in backends), name
    assert torch.tiny.get_device_name("tiny:0") == name == torch.tiny.get_device_name(0)
