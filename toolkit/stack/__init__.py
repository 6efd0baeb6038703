"""The stack: pinned NVIDIA software, hardware profiles, the compatibility matrix.

Import the submodule that owns a name (``toolkit.stack.models``: the models and
``load_stack_file``; ``check``: the checker; ``resolve``: ``resolve`` and ``stack_id``;
``catalog``: the GPU catalogue; ``systems``: the supported OSes). Nothing is re-exported
here, so that importing one submodule (``cli/stack.py`` reads ``systems`` for ``--help``)
does not load the others.
"""
