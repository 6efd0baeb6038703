"""gpunode's node-side acceptance runner: the standard library plus optional torch.

It is shipped to a node as one zipapp (``python3 node_runner.pyz ...``, built by
``toolkit.acceptance.payload``) and run there; it imports nothing of ``toolkit`` outside this
package but what payload ships with it. It measures and collects facts and writes one JSON
result; the verdict is given on the control machine (``toolkit.acceptance.verdict``), which also
parses nccl-tests output. One module per kind of check: ``facts`` (no framework), ``probe``
(NCCL), ``collective`` and ``rank`` (the all-reduce), ``storage``, ``train``, ``gpu``, ``fabric``
(the host-to-container contract: the devices the ranks' container is given and must see),
``node`` (one node's run) and ``__main__`` (the command line).

Subcommands:

- ``run --spec SPEC.json --out RESULT.json``: every check of one node (GPU inventory,
  versions, health, a local all-reduce over the node's GPUs or CPU ranks, GEMM, memory and
  host-device bandwidth per GPU, ``/data`` throughput, and the training-shaped checks: random
  reads from many files, a checkpoint round trip, a data-parallel loop fed by a DataLoader,
  scaling from 1 to all GPUs).
- ``allreduce --nnodes N --node-rank I --nproc P --master-addr A --master-port PORT ...``:
  the ranks of one node of a multi-node all-reduce (torch.distributed; ``nccl`` on GPUs,
  ``gloo`` on the CPU); with ``--p2p`` two single-rank nodes also time each direction; with
  ``--train-from SPEC.json`` the ranks then run the training loop at 1, 2, 4 ... all ranks
  of all nodes (scaling across nodes), each node reading its own data path; with
  ``--host-fabric HOST.json`` the ranks start only if the container shows them every device
  the host has (else the result is a harness error naming what is missing).
- ``worker``: one rank (internal; started by the two above); with ``--train SPEC.json`` it
  also restores the checkpoint (rank 0) and runs the loop at every scaling point.
- ``framework --spec SPEC.json --out RESULT.json``: only the checks that need the framework
  (versions, all-reduce, GPU speed, ``/data``); ``run`` starts it inside the training image
  when the spec names one (``container.image``), else runs it in its own Python. In the image
  it first compares what the ranks see with the host's devices (``host_fabric``) and stops
  with a harness error on a mismatch.
- ``nccl-probe``: which libnccl the framework in this Python loads (file, version, pip wheel
  or system package), as JSON; ``gpunode image inspect`` and the acceptance check use it.

Exit codes: 0 the result was written (whatever it says), 2 bad arguments, 3 it could not run.
"""
