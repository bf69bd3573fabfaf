"""torch.tiny.get_device_name() says which backend runs, as torch.cuda.get_device_name does."""

import os

import torch


def test_get_device_name_names_the_backend_tiny_device_chose():
    name = torch.tiny.get_device_name()
    backend = os.environ.get("TINY_DEVICE", "CPU")
    assert name.startswith(f"tiny {backend}"), name
    assert torch.tiny.get_device_name("tiny:0") == name == torch.tiny.get_device_name(0)
