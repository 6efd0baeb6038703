"""Rollouts: moving a fleet's nodes onto a new stack lock, a few at a time (issue 39).

``plan`` is pure: from what each node has (its state file and its drift against the lock, as
one drift run reads them) and the options, which nodes change, what changes on each, the
canary and the waves. ``record`` owns the rollout's record in its run folder
(``rollout.json``): its schema, each node's status and the only transitions between them,
written whole so that a later run can resume. The flow that reads the nodes is
``toolkit/steps/rollout.py``. Nothing is re-exported here: import the submodule that owns a
name.
"""
