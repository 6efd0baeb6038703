"""The lab: simulated GPU nodes on the local Docker engine.

Systemd containers made from a debootstrapped Debian 12 image, loop-device NVMe data disks,
a signed apt repository of NVIDIA stand-in packages and the GPU emulation behind the
stand-in ``nvidia-smi``. Everything a lab creates carries the label ``gpunode.lab=<name>``;
``toolkit.lab.lab`` is the entry point (``up``, ``status``, ``down``, faults).
"""
