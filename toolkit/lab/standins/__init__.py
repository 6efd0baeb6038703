"""Sources of the lab's stand-in package contents (scripts, units, maintainer scripts).

Nothing here is imported by gpunode itself: ``toolkit.lab.package_spec.render`` reads these files
and bakes versions into them when the lab repository is built. The ``*.py`` files are
stdlib-only Python 3 programs that run on the lab nodes; ``*.j2`` files are Jinja templates.
"""
