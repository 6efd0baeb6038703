"""gpunode_apt_sources: one source per repository, in apt's one-line and deb822 formats.

The files are judged by the real apt of this machine: before the module runs, apt refuses
them ("Conflicting values set for option Signed-By", NVIDIA/cuda-repo-management#4); after,
it reads them and lists the repository once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from shared_fixtures import REPO

from toolkit.plugins.modules import gpunode_apt_sources as module

ROOT = REPO
REPO = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
KEEP = "sources.list.d/gpunode-nvidia-cuda.list"
# cuda-keyring_1.1-1_all.deb's source (see toolkit/lab/lab.py, the `keyring` fault).
CUDA_KEYRING = f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {REPO} /\n"
UBUNTU = (
    "Types: deb\n"
    "URIs: http://archive.ubuntu.com/ubuntu/\n"
    "Suites: noble noble-updates\n"
    "Components: main restricted\n"
    "Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n"
)


def apt_dir(tmp_path: Path, files: dict[str, str]) -> Path:
    """An apt configuration folder with gpunode's own source and ``files``."""
    root = tmp_path / "apt"
    (root / "sources.list.d").mkdir(parents=True)
    (root / "sources.list").write_text("")
    own = f"deb [signed-by=/etc/apt/keyrings/gpunode-nvidia-cuda.asc] {REPO} /\n"
    (root / KEEP).write_text(own)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def apt_uris(root: Path) -> subprocess.CompletedProcess[str]:
    """What the real apt makes of the folder (``update --print-uris`` downloads nothing)."""
    lists = root.parent / "lists"
    (lists / "partial").mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [
            "apt-get",
            f"-oDir::Etc::sourcelist={root / 'sources.list'}",
            f"-oDir::Etc::sourceparts={root / 'sources.list.d'}",
            f"-oDir::State::Lists={lists}",
            "--print-uris",
            "update",
        ],
        capture_output=True,
        text=True,
        check=False,
    )


ARCH = subprocess.run(
    ["dpkg", "--print-architecture"], capture_output=True, text=True, check=False
).stdout.strip()


def converge(root: Path, url: str = REPO) -> list[dict[str, object]]:
    changes = module.plan(root, url, root / KEEP, ARCH)
    for change in changes:
        module.write_atomic(Path(str(change["path"])), str(change["text"]))
    return changes


needs_apt = pytest.mark.skipif(shutil.which("apt-get") is None, reason="apt-get is not installed")


@needs_apt
def test_cuda_keyring_list_is_commented_out_and_apt_reads_the_sources(tmp_path: Path) -> None:
    root = apt_dir(tmp_path, {"sources.list.d/cuda-ubuntu2404-x86_64.list": CUDA_KEYRING})
    before = apt_uris(root)
    assert before.returncode != 0 and "Conflicting values set for option Signed-By" in before.stderr
    changes = converge(root)
    assert [c["format"] for c in changes] == ["one-line"]
    text = (root / "sources.list.d/cuda-ubuntu2404-x86_64.list").read_text()
    assert text.startswith("# deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg]")
    assert "disabled by gpunode" in text and KEEP in text
    after = apt_uris(root)
    assert after.returncode == 0, after.stderr
    assert after.stdout.count("compute/cuda/repos/ubuntu2404/x86_64/InRelease") == 1
    assert converge(root) == []  # nothing left to do: the next run changes nothing


@needs_apt
def test_deb822_stanza_gets_enabled_no_and_other_stanzas_stay(tmp_path: Path) -> None:
    cuda = f"Types: deb\nURIs: {REPO.rstrip('/')}\nSuites: /\nSigned-By: /k/c.gpg\n"
    root = apt_dir(tmp_path, {"sources.list.d/mixed.sources": f"{UBUNTU}\n# NVIDIA\n{cuda}"})
    assert "Conflicting values" in apt_uris(root).stderr
    changes = converge(root)
    assert [c["format"] for c in changes] == ["deb822"]
    text = (root / "sources.list.d/mixed.sources").read_text()
    assert text.startswith(UBUNTU)  # the Ubuntu stanza is untouched
    assert "Enabled: no\nTypes: deb\n" in text and text.count("Enabled: no") == 1
    after = apt_uris(root)
    assert after.returncode == 0, after.stderr
    assert "archive.ubuntu.com/ubuntu/dists/noble/InRelease" in after.stdout
    assert after.stdout.count("ubuntu2404/x86_64/InRelease") == 1
    assert converge(root) == []


@needs_apt
def test_deb822_stanza_with_other_uris_loses_only_this_one(tmp_path: Path) -> None:
    stanza = (
        "Types: deb\n"
        "URIs: https://mirror.example.org/nvidia/\n"
        f" {REPO}\n"
        "Suites: /\n"
        "Enabled: yes\n"
        "Signed-By: /usr/share/keyrings/cuda.gpg\n"
    )
    root = apt_dir(tmp_path, {"sources.list.d/nvidia.sources": stanza})
    changes = converge(root)
    assert changes and "URIs" in str(changes[0]["disabled"])
    text = (root / "sources.list.d/nvidia.sources").read_text()
    assert "URIs: https://mirror.example.org/nvidia/\n" in text and REPO not in text.split("#")[0]
    assert "Enabled: yes" in text  # the mirror stays enabled
    after = apt_uris(root)
    assert after.returncode == 0, after.stderr
    assert "mirror.example.org/nvidia/InRelease" in after.stdout


def test_disabled_stanzas_comments_and_other_repositories_are_left_alone(tmp_path: Path) -> None:
    files = {
        "sources.list": f"# {CUDA_KEYRING}deb http://deb.debian.org/debian bookworm main\n",
        "sources.list.d/off.sources": f"Types: deb\nURIs: {REPO}\nSuites: /\nEnabled: no\n",
        "sources.list.d/other.list": f"deb [signed-by=/k.gpg] {REPO}sub/ /\n",
        "sources.list.d/readme.txt": CUDA_KEYRING,  # apt reads only .list and .sources
    }
    root = apt_dir(tmp_path, files)
    assert module.plan(root, REPO, root / KEEP, ARCH) == []


def test_deb_src_and_trailing_slashes_count_as_the_same_repository(tmp_path: Path) -> None:
    text = f"deb-src {REPO.rstrip('/')} /\ndeb [arch=amd64] {REPO}// /\n"
    new, disabled = module.disable_list(text, REPO, "/keep.list", ARCH)
    assert len(disabled) == 2 and all(line.startswith("# deb") for line in new.splitlines())


def test_file_mode_is_kept(tmp_path: Path) -> None:
    root = apt_dir(tmp_path, {"sources.list.d/cuda.list": CUDA_KEYRING})
    path = root / "sources.list.d/cuda.list"
    path.chmod(0o600)
    converge(root)
    assert path.stat().st_mode & 0o777 == 0o600


def test_the_module_runs_under_ansible_and_honours_check_mode(tmp_path: Path) -> None:
    root = apt_dir(tmp_path, {"sources.list.d/cuda.list": CUDA_KEYRING})
    ansible = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin" / "ansible"
    if not ansible.exists():
        ansible = Path(shutil.which("ansible") or "ansible")
    env = {**os.environ, "ANSIBLE_LIBRARY": str(ROOT / "toolkit/plugins/modules")}

    def call(*extra: str) -> dict[str, object]:
        args = f"url={REPO} keep={root / KEEP} apt_dir={root}"
        argv = [str(ansible), "localhost", "-c", "local", "-o", "-m", "gpunode_apt_sources"]
        proc = subprocess.run(
            [*argv, "-a", args, *extra],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # one line per host: `localhost | CHANGED => {...}`
        return dict(json.loads(proc.stdout.split(" => ", 1)[1]))

    checked = call("--check")
    assert checked["changed"] and (root / "sources.list.d/cuda.list").read_text() == CUDA_KEYRING
    applied = call()
    assert applied["changed"] and applied["disabled"][0]["format"] == "one-line"  # type: ignore[index]
    assert call()["changed"] is False


# NVIDIA's published list (NVIDIA/libnvidia-container stable/deb/nvidia-container-toolkit.list)
# as its install guide writes it: `sed 's#deb https://#deb [signed-by=...] https://#g'` over
# both lines, into sources.list.d/nvidia-container-toolkit.list.
TOOLKIT_BASE = "https://nvidia.github.io/libnvidia-container"
TOOLKIT_LIST = (
    "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
    f"{TOOLKIT_BASE}/stable/deb/$(ARCH) /\n"
    "#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
    f"{TOOLKIT_BASE}/experimental/deb/$(ARCH) /\n"
)


@needs_apt
def test_nvidias_arch_variable_list_is_matched_after_apts_substitution(tmp_path: Path) -> None:
    url = f"{TOOLKIT_BASE}/stable/deb/{ARCH}/"
    root = tmp_path / "apt"
    (root / "sources.list.d").mkdir(parents=True)
    (root / "sources.list").write_text("")
    keep = root / "sources.list.d/gpunode-nvidia-container-toolkit.list"
    keep.write_text(f"deb [signed-by=/etc/apt/keyrings/gpunode-toolkit.asc] {url} /\n")
    listed = root / "sources.list.d/nvidia-container-toolkit.list"
    listed.write_text(TOOLKIT_LIST)
    before = apt_uris(root)  # apt itself reads $(ARCH) as this machine's architecture
    assert before.returncode != 0 and "Conflicting values set for option Signed-By" in before.stderr
    changes = module.plan(root, url, keep, ARCH)
    assert [c["disabled"] for c in changes] == [[TOOLKIT_LIST.splitlines()[0]]]
    module.write_atomic(listed, str(changes[0]["text"]))
    after = apt_uris(root)
    assert after.returncode == 0, after.stderr
    assert after.stdout.count(f"stable/deb/{ARCH}/InRelease") == 1
    assert module.plan(root, url, keep, ARCH) == []
    # Another architecture's URL is another repository.
    assert module.plan(root, f"{TOOLKIT_BASE}/stable/deb/arm64/", keep, ARCH) == []
