"""The parts of the lab's stand-in ``nvidia-smi`` (``../nvidia_smi.py``), one module per concern.

``state``: the node's emulated GPUs, driver and persistence as the lab writes them; ``fields``:
``--query-gpu``, ``--query-remapped-rows`` and ``--query-compute-apps``; ``report``: ``-L``,
the summary table and ``-q``; ``topo``: ``topo -m``. Stdlib only: the nvidia-smi package installs
them under ``/usr/lib/gpunode-lab/nvidia-smi/smi/``, where the script finds them.
"""
