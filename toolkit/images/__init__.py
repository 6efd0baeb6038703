"""Training container images: recipe, build, normalisation, distribution, inspection.

``recipe`` derives a pure recipe from a group's resolved stack; ``render`` turns it into a
build context from the Jinja2 templates in ``images/training/``; ``build`` drives the local
Docker engine (``engine`` owns the client and the build lock) and ``normalise`` rewrites
what the classic builder stamps with build times, so the same inputs give the same image
ID; ``distribute`` moves an image to nodes (SSH or a registry); ``inspect`` reads what an
image really carries.
"""
