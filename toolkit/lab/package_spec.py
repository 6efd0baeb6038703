"""One stand-in package of the lab repository: its control fields, files and maintainer
scripts (``PackageSpec``, ``FileSpec``), and the rendering of their contents from
``toolkit/lab/standins/``. What the packages are is ``catalog`` (and ``driver_packages``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

STANDINS = Path(__file__).with_name("standins")

# Every package's maintainer field: the stand-ins are not NVIDIA's packages.
MAINTAINER = "gpunode lab <lab@gpunode.invalid>"
LIBDIR = "/usr/lib/x86_64-linux-gnu"


@dataclass(frozen=True)
class FileSpec:
    """One file (or symlink) in a package."""

    path: str
    content: bytes = b""
    mode: int = 0o644
    link: str | None = None  # a symlink to this target instead of a file
    conffile: bool = False


@dataclass(frozen=True)
class PackageSpec:
    """One stand-in package: control fields, files and maintainer scripts."""

    name: str
    version: str
    description: str
    section: str = "multiverse/libs"
    architecture: str = "amd64"
    source: str = ""
    depends: tuple[str, ...] = ()
    recommends: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    replaces: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    files: tuple[FileSpec, ...] = ()
    scripts: tuple[tuple[str, str], ...] = ()  # (postinst|prerm|postrm|preinst, text)
    repository: str = "cuda"  # "cuda" or "container-toolkit": which flat repo carries it

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_{self.architecture}.deb"

    def control(self) -> str:
        """The ``DEBIAN/control`` text."""
        size_kib = max(1, sum(len(f.content) for f in self.files) // 1024)
        fields = [
            ("Package", self.name),
            ("Source", self.source or self.name),
            ("Version", self.version),
            ("Architecture", self.architecture),
            ("Maintainer", MAINTAINER),
            ("Installed-Size", str(size_kib)),
            ("Depends", ", ".join(self.depends)),
            ("Recommends", ", ".join(self.recommends)),
            ("Conflicts", ", ".join(self.conflicts)),
            ("Replaces", ", ".join(self.replaces)),
            ("Provides", ", ".join(self.provides)),
            ("Section", self.section),
            ("Priority", "optional"),
        ]
        lines = [f"{key}: {value}" for key, value in fields if value]
        summary, _, body = self.description.partition("\n")
        lines.append(f"Description: {summary}")
        lines.extend(f" {line.strip()}" if line.strip() else " ." for line in body.splitlines())
        lines.append(" This is a gpunode lab stand-in: it emulates the package without hardware.")
        return "\n".join(lines) + "\n"


_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(STANDINS)),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
)


def render(name: str, **values: str) -> str:
    """Render one stand-in source.

    ``*.j2`` files are Jinja templates; ``*.py`` scripts carry ``@KEY@`` markers (so that they
    stay valid Python for the linters) that are replaced by the upper-cased keys of
    ``values``. Every marker must be filled.

    Raises:
        ValueError: A marker was left unfilled.
    """
    if name.endswith(".j2"):
        return _ENV.get_template(name).render(**values)
    text = (STANDINS / name).read_text()
    for key, value in values.items():
        text = text.replace(f"@{key.upper()}@", value)
    leftover = sorted(set(re.findall(r"@[A-Z][A-Z_]*@", text)))
    if leftover:
        raise ValueError(f"stand-in {name}: markers left unfilled: {', '.join(leftover)}")
    return text


def source_files() -> list[Path]:
    """Every stand-in source, for the repository's cache key."""
    return sorted(p for p in STANDINS.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def script(text: str) -> bytes:
    """A stand-in script's text as a package file's bytes."""
    return text.encode()


# Where the nvidia-smi package puts the stand-in's parts (``standins/smi/``): the script,
# /usr/bin/nvidia-smi, finds them under its folder's sibling lib/.
SMI_PARTS_DIR = "/usr/lib/gpunode-lab/nvidia-smi/smi"


def nvidia_smi_files(version: str, cuda_version: str, nvml_version: str) -> tuple[FileSpec, ...]:
    """The stand-in nvidia-smi as its package installs it: the script with the driver's
    versions baked in, and its parts."""
    smi = render(
        "nvidia_smi.py", version=version, cuda_version=cuda_version, nvml_version=nvml_version
    )
    parts = sorted((STANDINS / "smi").glob("*.py"))
    return (
        FileSpec("/usr/bin/nvidia-smi", script(smi), 0o755),
        *(FileSpec(f"{SMI_PARTS_DIR}/{part.name}", part.read_bytes()) for part in parts),
    )
