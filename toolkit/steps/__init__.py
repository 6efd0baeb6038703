"""The steps the CLI offers, each a core function returning a typed outcome.

One module per step, and ``toolkit/cli/<name>.py`` renders the step of the same name:
``provision`` (provision and drift), ``disks`` (plan, apply), ``status``, ``up``; ``precheck``
is the stack (and lock) check every one of them runs before it touches a host. Steps are the
floor above the domain packages (acceptance, images, disks, ansible, remote, report) and
below the CLI: nothing under ``toolkit`` but ``toolkit/cli`` imports them, and they never
print (they report through :mod:`toolkit.progress`).
"""
