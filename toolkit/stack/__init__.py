"""The stack: pinned NVIDIA software, hardware profiles, the compatibility matrix.

Public API: the models (:class:`Stack`, :class:`HardwareProfile`, :class:`StackFile`,
:func:`load_stack_file`), the checker (:func:`check`, :class:`Violation`), :func:`resolve`
and :func:`stack_id`, and the GPU catalog (:func:`lookup_gpu`).
"""

from toolkit.stack.catalog import GpuInfo, lookup_gpu
from toolkit.stack.check import RULES, Violation, check, has_errors
from toolkit.stack.models import (
    DriverPin,
    GpuSpec,
    HardwareProfile,
    Stack,
    StackFile,
    load_stack_file,
)
from toolkit.stack.resolve import canonical, resolve, stack_id
from toolkit.stack.systems import SUPPORTED_OS

__all__ = [
    "RULES",
    "SUPPORTED_OS",
    "DriverPin",
    "GpuInfo",
    "GpuSpec",
    "HardwareProfile",
    "Stack",
    "StackFile",
    "Violation",
    "canonical",
    "check",
    "has_errors",
    "load_stack_file",
    "lookup_gpu",
    "resolve",
    "stack_id",
]
