"""The skills bundle: a tenant's shared and agents' skills (with their history) exported, verified and folded into
another tenant without duplicates; broken or tampered bundles refused with the reason."""

from __future__ import annotations

import io
import tarfile
from datetime import timedelta
from pathlib import Path

import pytest

from mnemoflow.errors import InvalidInput
from mnemoflow.governance.archive import write_archive
from mnemoflow.skills.bundle import SkillsManifest, export_skills, import_skills, read_skills_bundle
from mnemoflow.skills.model import NodeRef, Skill, SkillStep
from mnemoflow.skills.store import SkillStore
from mnemoflow.storage import LocalFileStore
from tests.skill_tasks import NOW


def _skill(name: str, when: str, area: str, session: str) -> Skill:
    ref = NodeRef(session=session, node_id="001-N1")
    return Skill(
        name=name,
        when_to_use=when,
        area=area,
        steps=(SkillStep(text=f"Edit: {area}/core.py", source=ref),),
        sources=(f"{session}#001",),
        created=NOW,
        updated=NOW,
    )


@pytest.fixture
def files(tmp_path: Path) -> LocalFileStore:
    files = LocalFileStore(tmp_path)
    shared = SkillStore(files, "acme")
    parse = _skill("fix-dateparse-tz", "fix a crash parsing timezone offsets in dateparse", "dateparse", "s1")
    shared.put(parse)
    shared.edit(parse.model_copy(update={"when_to_use": "fix timezone offset crashes in dateparse"}), NOW)
    SkillStore(files, "acme", "coder").put(_skill("cache-http", "add an LRU cache to the HTTP client", "http", "s2"))
    return files


def _bundle(files: LocalFileStore, **kwargs: object) -> bytes:
    out = io.BytesIO()
    export_skills(files, "acme", out, at=NOW, **kwargs)  # type: ignore[arg-type]
    return out.getvalue()


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.md"))}


def test_round_trip_into_another_tenant_is_byte_equal_and_a_second_import_adds_nothing(
    files: LocalFileStore, tmp_path: Path
) -> None:
    data = _bundle(files, history=True)
    names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
    assert names == [
        "skills/shared/fix-dateparse-tz.md",
        "skills/shared/history/fix-dateparse-tz/v1.md",
        "skills/agent/coder/cache-http.md",
        "manifest.json",
    ]
    learnt = import_skills(files, "beta", read_skills_bundle(io.BytesIO(data)), NOW)
    assert [(x.action, x.skill) for x in learnt] == [("store", "cache-http"), ("store", "fix-dateparse-tz")]
    assert _tree(tmp_path / "beta") == _tree(tmp_path / "acme")  # skills and history, byte for byte
    again = import_skills(files, "beta", read_skills_bundle(io.BytesIO(data)), NOW + timedelta(days=1))
    assert {x.action for x in again} == {"skip"} and _tree(tmp_path / "beta") == _tree(tmp_path / "acme")


def test_a_scope_alone_and_a_tenant_that_knows_the_task_already(files: LocalFileStore, tmp_path: Path) -> None:
    data = _bundle(files, scopes=["agent:coder"])
    assert list(read_skills_bundle(io.BytesIO(data)).skills) == ["agent:coder"]
    # beta learnt task s1#001 itself, under another name: the bundle's skill of that task is skipped
    SkillStore(files, "beta").put(_skill("dateparse-offsets", "dateparse timezone offsets", "dateparse", "s1"))
    (item,) = [
        x
        for x in import_skills(files, "beta", read_skills_bundle(io.BytesIO(_bundle(files))), NOW)
        if x.task.startswith("skills/shared/")
    ]
    assert item.action == "skip" and SkillStore(files, "beta").names() == ["dateparse-offsets"]


def _rewrite(data: bytes, change: dict[str, bytes]) -> bytes:
    """``data`` with members replaced (or added) but the manifest kept: what tampering in transit looks like."""
    source, out = tarfile.open(fileobj=io.BytesIO(data)), io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        members = {m.name: source.extractfile(m).read() for m in source.getmembers()}  # type: ignore[union-attr]
        for name, body in {**members, **change}.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return out.getvalue()


def test_broken_or_tampered_bundles_are_refused_with_the_reason(files: LocalFileStore) -> None:
    data = _bundle(files)
    tampered = _rewrite(data, {"skills/shared/fix-dateparse-tz.md": b"-----META-START-----\nname: evil\n"})
    with pytest.raises(InvalidInput, match="fix-dateparse-tz.md does not match its checksum"):
        read_skills_bundle(io.BytesIO(tampered))
    with pytest.raises(InvalidInput, match="members and manifest differ"):
        read_skills_bundle(io.BytesIO(_rewrite(data, {"skills/shared/extra.md": b"x"})))
    with pytest.raises(InvalidInput, match="not a readable bundle"):
        read_skills_bundle(io.BytesIO(b"not a tar at all" * 64))
    user_bundle = _rewrite(data, {"manifest.json": b'{"format": "mnemoflow-user-bundle", "version": 2}'})
    with pytest.raises(InvalidInput, match="manifest is invalid"):
        read_skills_bundle(io.BytesIO(user_bundle))


@pytest.mark.parametrize(
    ("member", "body", "reason"),
    [
        ("skills/team/eng/x.md", b"", "is not skills/"),
        ("skills/agent/../x.md", b"", "is not skills/"),
        ("skills/shared/x.md", b"no header", "skills/shared/x.md: no META header"),
        ("skills/shared/history/x/v1.md", b"", "history of shared skills it does not hold"),
    ],
)
def test_a_checksummed_member_outside_the_layout_is_refused(member: str, body: bytes, reason: str) -> None:
    out = io.BytesIO()
    write_archive(out, [(member, body)], SkillsManifest(tenant="acme", created_at=NOW), NOW)
    with pytest.raises(InvalidInput, match=reason):
        read_skills_bundle(io.BytesIO(out.getvalue()))
