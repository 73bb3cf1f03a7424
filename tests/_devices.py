"""Marks of the tests that need a device."""
import pytest
import torch

#: a case (``pytest.param(..., marks=ON_A_GPU)``) that needs a CUDA device: marked ``gpu`` and skipped without one
ON_A_GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
