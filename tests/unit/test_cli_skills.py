"""``mnemoflow skill`` on a data directory: distil, list, show, edit, delete."""

from pathlib import Path

from typer.testing import CliRunner

from mnemoflow.cli.main import app
from tests.skill_tasks import EN, replayed

runner = CliRunner(env={"COLUMNS": "200"})  # error boxes wrap at the terminal width


def test_distil_list_show_edit_delete(tmp_path: Path) -> None:
    replayed(tmp_path, "s1", EN, tenant="acme")
    where = ["--tenant", "acme", "--data-dir", str(tmp_path)]
    distilled = runner.invoke(app, ["skill", "distil", "s1", *where])
    assert distilled.exit_code == 0 and "store" in distilled.output
    listed = runner.invoke(app, ["skill", "list", *where])
    name = next(line.split("│")[1].strip() for line in listed.output.splitlines() if "dateparse" in line)
    shown = runner.invoke(app, ["skill", "show", name, *where])
    assert shown.exit_code == 0 and "## Steps" in shown.output
    edited = tmp_path / "edited.md"
    edited.write_text(shown.output.replace("## Pitfalls", "## Pitfalls\n- read the tz docs [from s1#001-N1]"))
    out = runner.invoke(app, ["skill", "edit", name, str(edited), *where])
    assert out.exit_code == 0 and "version 2" in out.output
    assert "read the tz docs" in runner.invoke(app, ["skill", "show", name, *where]).output
    edited.write_text("not a skill")
    refused = runner.invoke(app, ["skill", "edit", name, str(edited), *where])
    assert refused.exit_code != 0 and "not a skill file" in refused.output
    assert runner.invoke(app, ["skill", "delete", name, *where]).exit_code == 0
    missing = runner.invoke(app, ["skill", "show", name, *where])
    assert missing.exit_code != 0 and "no skill named" in missing.output


def test_export_and_import_a_skills_bundle(tmp_path: Path) -> None:
    replayed(tmp_path, "s1", EN, tenant="acme")
    data = ["--data-dir", str(tmp_path)]
    runner.invoke(app, ["skill", "distil", "s1", "--tenant", "acme", *data])
    bundle = tmp_path / "skills.tar"
    out = runner.invoke(app, ["skill", "export", str(bundle), "--tenant", "acme", "--scope", "shared", *data])
    assert out.exit_code == 0 and "files: 1" in out.output  # one skill
    imported = runner.invoke(app, ["skill", "import", str(bundle), "--tenant", "beta", *data])
    assert imported.exit_code == 0 and "store" in imported.output
    again = runner.invoke(app, ["skill", "import", str(bundle), "--tenant", "beta", *data])
    assert again.exit_code == 0 and "skip" in again.output and "store" not in again.output
    bundle.write_bytes(bundle.read_bytes().replace(b"## Steps", b"## STEPS", 1))
    refused = runner.invoke(app, ["skill", "import", str(bundle), "--tenant", "beta", *data])
    assert refused.exit_code != 0 and "checksum" in refused.output
