"""Checks shaped like training: the data path's throughput, storage under a training read
pattern, the checkpoint round trip, the training loop's data wait and GPU utilisation, and
scaling over ranks and nodes."""

from __future__ import annotations

from typing import Any

from toolkit.acceptance.check import Check, floor_check, floor_checks, not_measured
from toolkit.profile.floors import AcceptanceSpec, format_size


def data_checks(result: dict[str, Any], spec: AcceptanceSpec) -> list[Check]:
    """The data path's write and read throughput against their floors, where set."""
    data = result.get("data")
    if spec.min_data_read_mbps is None and spec.min_data_write_mbps is None:
        return []
    if not data or data.get("error"):
        return [Check("data.run", False, (data or {}).get("error") or "not measured")]
    return floor_checks(
        data,
        (
            ("data.write", "write_mbps", spec.min_data_write_mbps),
            ("data.read", "read_mbps", spec.min_data_read_mbps),
        ),
        "MB/s",
    )


def training_checks(result: dict[str, Any], spec: AcceptanceSpec) -> list[Check]:
    """Storage under a training read pattern, the checkpoint round trip, the data-loader
    wait, GPU utilisation and scaling (the runner's ``storage``, ``checkpoint``, ``train``).

    A round trip that does not restore bit-identical state always fails; the other figures
    are judged where the profile sets a floor and shown otherwise.
    """
    storage = result.get("storage")
    if storage is None:
        # No data path on this node: only floors that were asked for are a failure.
        asked = [
            name
            for name in (
                "max_read_p99_ms",
                "min_files_per_s",
                "min_checkpoint_write_mbps",
                "min_checkpoint_restore_mbps",
                "max_data_wait_share",
                "min_gpu_util_pct",
                "min_scaling_efficiency",
            )
            if getattr(spec, name) is not None
        ]
        if asked:
            return [
                Check("storage.run", False, f"not measured (no {spec.data_path}): {asked[0]} set")
            ]
        return []
    checks: list[Check] = []
    reads = storage.get("reads") or {}
    if storage.get("error"):
        checks.append(Check("storage.run", False, str(storage["error"])))
    else:
        cache = {"o_direct": "O_DIRECT", "fadvise": "page cache dropped (fadvise)"}.get(
            str(reads.get("cache")), str(reads.get("cache"))
        )
        detail = (
            f"{reads.get('reads')} reads of {format_size(int(reads.get('min_read_bytes') or 0))}"
            f"-{format_size(int(reads.get('max_read_bytes') or 0))} by "
            f"{reads.get('workers')} workers, {cache}: "
        )
        p99 = floor_check(
            "storage.read_p99",
            reads.get("p99_ms"),
            spec.max_read_p99_ms,
            "ms",
            at_most=True,
            what=detail + "p99 ",
        )
        checks += [p99] if p99 else []
        files = floor_check(
            "storage.files_per_s", reads.get("files_per_s"), spec.min_files_per_s, "files/s"
        )
        checks += [files] if files else []
    checks += _checkpoint_checks(result.get("checkpoint"), spec)
    checks += _loop_checks(result.get("train"), spec)
    return checks


def _checkpoint_checks(ckpt: dict[str, Any] | None, spec: AcceptanceSpec) -> list[Check]:
    if ckpt is None:
        return [Check("checkpoint.roundtrip", False, "no checkpoint round trip was run")]
    if ckpt.get("error") and not ckpt.get("mismatched"):
        return [Check("checkpoint.roundtrip", False, str(ckpt["error"]))]
    wrong = [*(ckpt.get("mismatched") or []), *(ckpt.get("missing") or [])]
    wrong += ckpt.get("unexpected") or []
    size = f"{int(ckpt.get('bytes') or 0) / 2**20:.1f} MiB"
    ok = bool(ckpt.get("identical")) and not wrong
    checks = [
        Check(
            "checkpoint.roundtrip",
            ok,
            f"{size} in {ckpt.get('tensors')} tensors restored bit-identical in a fresh process"
            if ok
            else "restored state differs from what was written: "
            + "; ".join(
                [f"{n}: bytes differ" for n in ckpt.get("mismatched") or []]
                + [f"{n}: missing" for n in ckpt.get("missing") or []]
                + [f"{n}: not written" for n in ckpt.get("unexpected") or []]
            ),
            measured=sorted(wrong),
            floor=[],
        )
    ]
    floors = (
        ("checkpoint.write", "write_mbps", spec.min_checkpoint_write_mbps),
        ("checkpoint.restore", "restore_mbps", spec.min_checkpoint_restore_mbps),
    )
    return checks + floor_checks(ckpt, floors, "MB/s")


def _loop_checks(train: dict[str, Any] | None, spec: AcceptanceSpec) -> list[Check]:
    floors = (spec.max_data_wait_share, spec.min_gpu_util_pct, spec.min_scaling_efficiency)
    if not train or train.get("error") or not train.get("loop"):
        reason = (train or {}).get("error") or "the training loop did not run"
        return (
            [Check("train.run", False, str(reason))] if any(f is not None for f in floors) else []
        )
    loop = train["loop"]
    checks: list[Check] = []
    wait = floor_check(
        "train.data_wait",
        loop.get("data_wait_share"),
        spec.max_data_wait_share,
        "of step time",
        at_most=True,
        what=f"{loop.get('ranks')} ranks, {loop.get('loader_workers')} loader workers: waiting ",
    )
    checks += [wait] if wait else []
    util = loop.get("gpu_util") or {}
    per_gpu = util.get("per_gpu") or {}
    if spec.min_gpu_util_pct is not None:
        if not util.get("measured"):
            checks.append(
                Check(
                    "train.gpu_util",
                    False,
                    f"not measured: {util.get('reason') or 'no sample'}",
                    floor=spec.min_gpu_util_pct,
                    unit="%",
                )
            )
        else:
            low = {i: v for i, v in per_gpu.items() if v < spec.min_gpu_util_pct}
            checks.append(
                Check(
                    "train.gpu_util",
                    not low,
                    "; ".join(f"GPU {i} {v:.0f}%" for i, v in sorted(low.items()))
                    + f" below floor {spec.min_gpu_util_pct}%"
                    if low
                    else f"every GPU >= {spec.min_gpu_util_pct}% busy during the loop",
                    measured={i: round(v, 1) for i, v in per_gpu.items()},
                    floor=spec.min_gpu_util_pct,
                    unit="%",
                )
            )
    elif not util.get("measured"):
        # Not measured, never passed: say why rather than print a number.
        reason = str(util.get("reason") or "no sample")
        checks.append(not_measured("train.gpu_util", reason, f"not judged: {reason}"))
    if spec.min_scaling_efficiency is not None:
        points = (train.get("scaling") or {}).get("points") or []
        checks.append(scaling_check("scaling.efficiency", points, spec.min_scaling_efficiency))
    return checks


def scaling_check(
    name: str, points: list[dict[str, Any]], floor: float | None, min_nodes: int = 1
) -> Check:
    """The worst scaling efficiency against 1 rank over the points of more than one rank
    that span at least ``min_nodes`` nodes, against ``floor`` (None: shown, not judged)."""
    scored = [p for p in points if p.get("ranks", 0) > 1 and int(p.get("nodes") or 1) >= min_nodes]
    if not scored:
        what = "one GPU (or rank)" if min_nodes == 1 else f"no point spans {min_nodes} nodes"
        return not_measured(
            name, f"{what}: nothing to scale", f"{what}: nothing to scale", floor=floor
        )
    worst = min(scored, key=lambda p: p.get("efficiency") or 0.0)
    value = float(worst.get("efficiency") or 0.0)
    ok = floor is None or value >= floor
    where = f"{worst['ranks']} ranks" + (
        f" on {worst['nodes']} nodes" if int(worst.get("nodes") or 1) > 1 else ""
    )
    judged = (
        "not judged (no floor set)" if floor is None else f"{'>=' if ok else '<'} floor {floor}"
    )
    message = (
        f"{value:.2f} at {where} against 1 {judged} ("
        + ", ".join(f"{p['ranks']}: {float(p.get('efficiency') or 0):.2f}" for p in points)
        + ")"
    )
    if floor is None:
        # Shown, not judged: a figure without a floor is not a pass.
        return not_measured(
            name, "no floor set", message, measured=round(value, 3), unit="fraction"
        )
    return Check(name, ok, message, measured=round(value, 3), floor=floor, unit="fraction")


def multi_node_scaling_check(section: dict[str, Any], floor: float | None) -> Check:
    """Scaling across nodes: the loop of a multi-node set (the runner's ``train`` section of
    rank 0), judged at the points that span more than one node."""
    train = section.get("train") or {}
    if train.get("error") or not train.get("scaling"):
        reason = train.get("error") or section.get("error") or "the ranks ran no training loop"
        if floor is None:
            return not_measured("multinode.scaling", str(reason), floor=floor)
        return Check("multinode.scaling", False, f"not measured: {reason}", floor=floor)
    points = train["scaling"].get("points") or []
    return scaling_check("multinode.scaling", points, floor, min_nodes=2)
