"""What gpunode records of its runs, and what is read back from them.

``runs`` owns the runs folder (ids, kinds, rotation, evidence kept, and the readers of what a
run leaves); ``passport`` is the node passport, read from those runs. Beside the playbook
engine, which writes into the runs folder, and below everything that reads a record.
Nothing is re-exported here: import the submodule that owns a name.
"""
