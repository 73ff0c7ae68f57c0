"""Fuzzing the published Iceberg and Delta state: whatever is done to one published
file of the versions before the newest, publishing the newest again from a cold process
writes exactly what s3ddb derives from the manifests.

A small publishing dataset (local path: appends, a delete with deletion vectors) is
built once with ten versions. Two reference trees of the published files are taken:

* **built on**: version 10 published again on the intact state of version 9 (the tree
  as it is);
* **afresh**: version 10 published again after the state of version 9 was found
  damaged (publication starts afresh from the manifests).

Each mutation damages one published file of versions 1 to 9 (bytes: bit flips,
truncation, a range duplicated or zeroed, garbage appended; or, for JSON, a path
replaced by a planted one, a value replaced by a planted path, an absurd number, a
deep list, a key dropped or a list element repeated), forgets what the process knows,
and publishes version 10 again. Per
format, every published file but the damaged one must then be byte-identical to one of
the two reference trees: a mutation publication did not detect changed nothing it
wrote, and one it detected made it start afresh, never fail or copy what it read. No
untyped error, and ``verify`` returns a report.

The mutations run in a child process with an address-space limit (RLIMIT_AS, 3 GiB).
``S3DDB_FUZZ_PUBLISHED_MUTATIONS=<n>`` sets their number (default 100);
``S3DDB_FUZZ_SEED`` the first seed.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

REPO = Path(__file__).resolve().parents[2]
FOLDERS = {"iceberg": ("metadata",), "delta": ("_delta_log", "dv")}
NEWEST = 10
PLANTED = ("/etc/passwd", "s3://other-bucket/planted.parquet", "../../outside.parquet")


def _tree(root: Path, skip: str | None = None) -> dict[str, dict[str, bytes]]:
    """Each format's published files (path relative to the root -> bytes)."""
    out: dict[str, dict[str, bytes]] = {}
    for name, folders in FOLDERS.items():
        files: dict[str, bytes] = {}
        for folder in folders:
            for p in sorted((root / folder).rglob("*")) if (root / folder).exists() else []:
                rel = str(p.relative_to(root))
                if p.is_file() and rel != skip:
                    files[rel] = p.read_bytes()
        out[name] = files
    return out


def _restore(root: Path, tree: dict[str, dict[str, bytes]]) -> None:
    wanted = {path: data for files in tree.values() for path, data in files.items()}
    for folders in FOLDERS.values():
        for folder in folders:
            for p in (root / folder).rglob("*") if (root / folder).exists() else []:
                if p.is_file() and str(p.relative_to(root)) not in wanted:
                    p.unlink()
    for path, data in wanted.items():
        target = root / path
        if not target.exists() or target.read_bytes() != data:
            target.write_bytes(data)


def _table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "s": [f"s{i}" for i in ids]})


def _build(root: Path) -> None:
    import s3ddb

    ds = s3ddb.write_dataset(_table(0, 20), str(root), open_formats=["iceberg", "delta"])
    ds.insert(_table(20, 10))
    ds.delete("id % 3 = 0")
    ds.insert(_table(30, 5))
    ds.delete("id = 31")
    for start in (40, 50, 60):
        ds.insert(_table(start, 3))
    ds.update({"s": "'changed'"}, where="id = 41")
    ds.delete("id = 61")
    # The newest publishes a Delta checkpoint (every tenth version): the whole state
    # it built on is written again.
    assert ds.version == NEWEST


def _republish(root: Path) -> None:
    import s3ddb
    from s3ddb.open_formats.publisher import forget_states

    forget_states()
    s3ddb.dataset(str(root)).publish_open_formats()


def _json_mutation(data: bytes, rng: random.Random) -> bytes | None:
    """One value of a JSON document (or of one line of a JSON-lines file) changed."""
    lines = data.decode("utf-8", "replace").split("\n")
    candidates = [i for i, line in enumerate(lines) if line.strip()]
    if not candidates:
        return None
    index = rng.choice(candidates)
    try:
        doc = json.loads(lines[index])
    except ValueError:
        return None
    nodes: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                nodes.append((node, key))
                walk(value)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                nodes.append((node, i))
                walk(value)

    walk(doc)
    if not nodes:
        return None
    # Paths first, half the time: what a planted file would be named by.
    paths = [
        (parent, key)
        for parent, key in nodes
        if isinstance(key, str) and any(w in key for w in ("path", "location", "-list", "file"))
    ]
    if paths and rng.random() < 0.5:
        parent, key = rng.choice(paths)
        parent[key] = rng.choice(PLANTED)
        lines[index] = json.dumps(doc, separators=(",", ":"))
        return "\n".join(lines).encode()
    parent, key = rng.choice(nodes)
    kind = rng.randrange(4)
    if kind == 0:
        parent[key] = rng.choice(
            [*PLANTED, 0, -1, 2**31, 2**63 - 1, -(2**63), "x" * 5000, None, True, {}, []]
        )
    elif kind == 1:
        parent[key] = json.loads("[" * 300 + "]" * 300)
    elif kind == 2 and isinstance(parent, dict):
        del parent[key]
    elif isinstance(parent, list):
        parent.insert(key, parent[key])
    else:
        parent[key] = rng.choice(PLANTED)
    lines[index] = json.dumps(doc, separators=(",", ":"))
    return "\n".join(lines).encode()


def _byte_mutation(data: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(5)
    n = len(data)
    if kind == 0 and n:
        out = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            out[rng.randrange(n)] ^= 1 << rng.randrange(8)
        return bytes(out)
    if kind == 1:
        return data[: rng.randrange(n + 1)]
    if kind == 2 and n:
        a = rng.randrange(n)
        b = rng.randrange(a, n + 1)
        return data[:b] + data[a:b] + data[b:]
    if kind == 3 and n:
        a = rng.randrange(n)
        b = min(n, a + rng.randint(1, 64))
        return data[:a] + bytes(b - a) + data[b:]
    return data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 256)))


def run_mutations(work: str, first_seed: int, count: int) -> list[str]:
    """Run ``count`` mutations on the dataset built in ``work``; what went wrong."""
    from s3ddb.errors import S3DDBError
    from s3ddb.maintenance.verify import verify

    root = Path(work) / "ds"
    _build(root)
    built_on = _tree(root)
    _republish(root)
    assert _tree(root) == built_on, "publishing again on an intact state changed a file"
    # The afresh outcome of each format: the state it builds on made unreadable.
    afresh: dict[str, dict[str, bytes]] = {}
    for name, damaged in (
        ("iceberg", f"metadata/v{NEWEST - 1}.metadata.json"),
        ("delta", f"_delta_log/{NEWEST - 1:020d}.json"),
    ):
        (root / damaged).write_bytes(b"not json")
        _republish(root)
        afresh[name] = {**_tree(root)[name], damaged: built_on[name][damaged]}
        _restore(root, built_on)
    assert afresh["iceberg"] != built_on["iceberg"] and afresh["delta"] != built_on["delta"]

    newest_files = (
        f"{NEWEST:020d}.",
        f"/v{NEWEST}.metadata.json",
        f"/snap-{NEWEST}.avro",
        f"-{NEWEST}.avro",
        "version-hint.text",
        "_last_checkpoint",
    )
    targets = sorted(
        path
        for files in built_on.values()
        for path in files
        if not any(marker in path for marker in newest_files)
    )
    problems: list[str] = []
    for seed in range(first_seed, first_seed + count):
        rng = random.Random(seed)
        path = rng.choice(targets)
        original = (root / path).read_bytes()
        mutated = None
        if path.endswith(".json") and rng.random() < 0.6:
            mutated = _json_mutation(original, rng)
        if mutated is None:
            mutated = _byte_mutation(original, rng)
        (root / path).write_bytes(mutated)
        try:
            _republish(root)
            verify(str(root))
        except S3DDBError as exc:
            problems.append(f"seed {seed} ({path}): publication failed: {exc!r}"[:500])
        except Exception as exc:  # the report names whatever escaped
            problems.append(f"seed {seed} ({path}): untyped {exc!r}"[:500])
        else:
            after = _tree(root, skip=path)
            for name in FOLDERS:
                outcomes = [
                    {p: d for p, d in reference[name].items() if p != path}
                    for reference in (built_on, afresh)
                ]
                if after[name] not in outcomes:
                    changed = sorted(
                        p
                        for p in set(after[name]) | set(outcomes[0])
                        if after[name].get(p) != outcomes[0].get(p)
                    )
                    problems.append(f"seed {seed} ({path}): {name} wrote {changed[:5]}")
        _restore(root, built_on)
    return problems


_CHILD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from tests.open_formats.test_fuzz_published import run_mutations
print(json.dumps(run_mutations(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))
"""


def test_mutated_published_state_is_built_on_exactly_or_published_afresh(
    tmp_path: Path,
) -> None:
    count = int(os.environ.get("S3DDB_FUZZ_PUBLISHED_MUTATIONS", "100"))
    seed = int(os.environ.get("S3DDB_FUZZ_SEED", "0"))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path), str(seed), str(count)],
        capture_output=True, text=True, timeout=900, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    problems = json.loads(done.stdout.strip().splitlines()[-1])
    assert problems == [], "\n".join(problems[:20])
