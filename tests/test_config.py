"""``[tool.gradguard]`` in pyproject.toml, command-line overrides, bad configs, suppression comments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradguard.cli import main

LEAF_BUG = "import torch\nx = torch.zeros(3, requires_grad=True)\nx += 1\n"


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text(LEAF_BUG)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def pyproject(root: Path, body: str) -> None:
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n\n" + body)


def check(capsys, *argv: str) -> tuple[int, list[dict], str]:
    """Exit code, JSON diagnostics, stderr."""
    code = main(["check", "--format", "json", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out)["diagnostics"] if out else []), err


def codes(diagnostics: list[dict]) -> list[str]:
    return [d["code"] for d in diagnostics]


# --- pyproject ---------------------------------------------------------------


def test_no_config_reports(project, capsys):
    code, diags, _ = check(capsys)
    assert code == 1 and codes(diags) == ["GG002"]


@pytest.mark.parametrize(
    "body",
    [
        '[tool.gradguard]\nselect = ["GG001"]\n',
        '[tool.gradguard]\nignore = ["GG002"]\n',
        '[tool.gradguard]\nignore = ["GG00"]\n',  # prefixes
    ],
)
def test_pyproject_disables(project, capsys, body):
    pyproject(project, body)
    code, diags, _ = check(capsys)
    assert (code, diags) == (0, [])


@pytest.mark.parametrize("pattern", ["train.py", "*.py"])
def test_pyproject_excludes_everything_then_nothing_was_checked(project, capsys, pattern):
    pyproject(project, f'[tool.gradguard]\nexclude = ["{pattern}"]\n')
    code, diags, err = check(capsys)
    assert (code, diags) == (2, []) and "All checks passed" not in err
    assert err.startswith("gradguard: no Python files or notebooks found under .; nothing was checked (the `exclude`")


def test_pyproject_severity(project, capsys):
    pyproject(project, '[tool.gradguard.severity]\nGG002 = "info"\n')
    code, diags, _ = check(capsys)
    assert code == 0  # info is below the default fail level
    assert [(d["code"], d["severity"]) for d in diags] == [("GG002", "info")]
    code, _, _ = check(capsys, "--fail-level", "info")
    assert code == 1


VIEW_OF_LEAF = "import torch\nfrom mylib import flip\nw = torch.randn(2, 3, requires_grad=True)\nv = flip(w)\nv.mul_(2)\n"


def test_view_functions_extend_the_view_table(project, capsys):
    """A function the user names in view-functions returns a view of its argument: writing it writes the leaf
    (torch raises "a view of a leaf Variable..."); unnamed, the call is unknown and nothing is said."""
    (project / "train.py").write_text(VIEW_OF_LEAF)
    assert check(capsys)[:2] == (0, [])
    pyproject(project, '[tool.gradguard]\nview-functions = ["mylib.flip"]\n')
    code, diags, _ = check(capsys)
    assert (code, [(d["code"], d["line"]) for d in diags]) == (1, [("GG003", 5)])


@pytest.mark.parametrize("value", ['"mylib.flip"', '[1]', '["not a name!"]'])
def test_view_functions_must_be_qualified_names(project, capsys, value):
    pyproject(project, f"[tool.gradguard]\nview-functions = {value}\n")
    code, _, err = check(capsys)
    assert code == 2 and "view-functions must be a list of qualified names" in err


def test_exclude_is_relative_to_the_pyproject(project, capsys):
    (project / "pkg" / "gen").mkdir(parents=True)
    (project / "pkg" / "gen" / "a.py").write_text(LEAF_BUG)
    (project / "pkg" / "b.py").write_text(LEAF_BUG)
    pyproject(project, '[tool.gradguard]\nexclude = ["pkg/gen/", "/train.py"]\n')
    _, diags, _ = check(capsys)
    assert [d["path"] for d in diags] == ["pkg/b.py"]
    # Also when run from a subfolder: the config is found above, patterns stay anchored at its folder.
    (project / "pkg" / "gen").joinpath("c.py").write_text(LEAF_BUG)
    _, diags, _ = check(capsys, "pkg")
    assert [d["path"] for d in diags] == ["pkg/b.py"]


def test_config_found_from_the_checked_path(tmp_path, monkeypatch, capsys):
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "train.py").write_text(LEAF_BUG)
    pyproject(proj, '[tool.gradguard]\nignore = ["GG002"]\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, diags, _ = check(capsys, str(proj))
    assert (code, diags) == (0, [])


def test_excluded_file_named_explicitly_is_analysed(project, capsys):
    pyproject(project, '[tool.gradguard]\nexclude = ["train.py"]\n')
    code, diags, _ = check(capsys, "train.py")
    assert code == 1 and codes(diags) == ["GG002"]


# --- command-line overrides --------------------------------------------------


def test_cli_select_overrides_pyproject(project, capsys):
    pyproject(project, '[tool.gradguard]\nselect = ["GG001"]\n')
    assert codes(check(capsys, "--select", "GG002")[1]) == ["GG002"]
    assert codes(check(capsys, "--select", "gg0")[1]) == ["GG002"]  # case-insensitive prefix


def test_cli_ignore_and_extend_ignore(project, capsys):
    pyproject(project, '[tool.gradguard]\nignore = ["GG002"]\n')
    assert codes(check(capsys, "--ignore", "GG005")[1]) == ["GG002"]  # --ignore replaces the file's list
    assert check(capsys, "--extend-ignore", "GG005")[1] == []  # --extend-ignore adds to it
    (project / "pyproject.toml").unlink()
    assert check(capsys, "--extend-ignore", "GG001,GG002")[1] == []
    assert check(capsys, "--ignore", "GG002")[1] == []


def test_cli_severity_overrides_pyproject(project, capsys):
    pyproject(project, '[tool.gradguard.severity]\nGG002 = "info"\n')
    code, diags, _ = check(capsys, "--severity", "GG002=error", "--severity", "gg001=info")
    assert code == 1 and diags[0]["severity"] == "error"


def test_explicit_config_file(project, capsys, tmp_path_factory):
    pyproject(project, '[tool.gradguard]\nignore = ["GG002"]\n')
    other = tmp_path_factory.mktemp("cfg") / "pyproject.toml"
    other.write_text('[tool.gradguard]\nselect = ["GG002"]\n[tool.gradguard.severity]\nGG002 = "warning"\n')
    code, diags, _ = check(capsys, "--config", str(other))
    assert code == 1 and [(d["code"], d["severity"]) for d in diags] == [("GG002", "warning")]
    # A pyproject without [tool.gradguard] means defaults, not the discovered file.
    bare = other.with_name("bare.toml")
    bare.write_text("[project]\nname = 'x'\n")
    assert codes(check(capsys, "--config", str(bare))[1]) == ["GG002"]


# --- bad configs -------------------------------------------------------------


@pytest.mark.parametrize(
    "body, message",
    [
        ("[tool.gradguard\n", "pyproject.toml"),
        ('[tool.gradguard]\nselct = ["GG001"]\n', "unknown keys: selct"),
        ("[tool.gradguard]\nselect = 3\n", "select must be a list"),
        ('[tool.gradguard.severity]\nGG001 = "fatal"\n', "unknown severity 'fatal'"),
        ('[tool.gradguard]\nseverity = "error"\n', "severity"),
        ("[tool.gradguard]\nexclude = [1]\n", "exclude must be a list"),
    ],
)
def test_bad_config_exits_2_with_one_line(project, capsys, body, message):
    pyproject(project, body)
    code, diags, err = check(capsys)
    assert code == 2 and diags == []
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradguard: ") and message in lines[0]


def test_missing_explicit_config_exits_2(project, capsys):
    code, _, err = check(capsys, "--config", "nope.toml")
    assert code == 2 and err.strip() == "gradguard: config file not found: nope.toml"


def test_bad_explicit_config_exits_2(project, capsys):
    (project / "bad.toml").write_bytes(b"[tool.gradguard]\nselect = [\"GG001\"\n")
    code, _, err = check(capsys, "--config", "bad.toml")
    assert code == 2 and err.startswith("gradguard: bad.toml: ") and len(err.strip().splitlines()) == 1


# --- suppression comments, end to end ----------------------------------------


@pytest.mark.parametrize(
    "comment, suppressed",
    [
        ("# gradguard: ignore[GG002]", True),
        ("# gradguard: ignore[GG001, GG002]", True),
        ("# gradguard: ignore", True),
        ("# noqa: GG002", True),
        ("# noqa", True),
        ("# gradguard: ignore[GG001]", False),
        ("# noqa: GG001", False),
    ],
)
def test_suppression_comments(project, capsys, comment, suppressed):
    (project / "train.py").write_text(LEAF_BUG.replace("x += 1", f"x += 1  {comment}"))
    code, diags, _ = check(capsys)
    if suppressed:
        assert (code, diags) == (0, [])
    else:
        assert code == 1 and codes(diags) == ["GG002"]


def test_suppression_on_another_line_does_nothing(project, capsys):
    (project / "train.py").write_text("# gradguard: ignore\n" + LEAF_BUG)
    code, diags, _ = check(capsys)
    assert code == 1 and [(d["code"], d["line"]) for d in diags] == [("GG002", 4)]


# --- where a bad setting came from (issue 29) ----------------------------------


def test_a_bad_editor_setting_names_the_editor_settings_not_the_pyproject():
    """The language server's settings (initializationOptions / workspace settings) are parsed by the same code
    as ``[tool.gradguard]``; a bad value there must not be blamed on a pyproject.toml it is not in."""
    from gradguard.lsp.settings import Settings

    settings = Settings()
    for bad, key in [({"select": ["GG777"]}, "gradguard.select"), ({"ignore": "GG8"}, "gradguard.ignore"),
                     ({"severity": {"GG001": "loud"}}, "gradguard.severity"), ({"jedi": "yes"}, "gradguard.jedi"),
                     ({"severity": {"GG999": "info"}}, "gradguard.severity"),
                     ({"baseline": "b.json"}, "gradguard.baseline")]:
        (warning,) = settings.set_overrides({"gradguard": bad})
        assert "editor settings" in warning and key in warning, warning
        assert "[tool.gradguard] " not in warning and "[tool.gradguard.severity]" not in warning, warning
        assert settings.config.select == ()  # the bad settings are dropped, the file's (none here) kept
    (warning,) = settings.set_overrides({"gradguard": 3})
    assert warning.startswith('editor settings: "gradguard" must be an object'), warning
    assert settings.set_overrides({"gradguard": {"select": ["GG1"]}}) == [] and settings.config.select == ("GG1",)


def test_a_bad_pyproject_setting_names_the_pyproject(project, capsys):
    from gradguard.config import ConfigError, config_from_table

    pyproject(project, '[tool.gradguard]\nselect = ["GG777"]\n')
    code, _, err = check(capsys)
    assert code == 2 and "pyproject.toml: [tool.gradguard] select: unknown rule code" in err, err
    pyproject(project, '[tool.gradguard.severity]\nGG001 = "loud"\n')
    code, _, err = check(capsys)
    assert code == 2 and "[tool.gradguard.severity]: unknown severity 'loud'" in err, err
    with pytest.raises(ConfigError, match=r"^\[tool\.gradguard\] jedi must be true or false"):
        config_from_table({"jedi": "yes"})


def test_every_listed_code_is_accepted_in_the_config(project, capsys):
    """Each code `gradguard rules` prints (input problems GG900/GG901/GG903 too) is a valid select/ignore entry in
    ``[tool.gradguard]`` and in the editor's settings."""
    from gradguard.config import config_from_table, EDITOR
    from gradguard.output import catalog

    listed = [info.code for info in catalog()]
    assert "GG903" in listed
    for code in listed:
        for source in ("pyproject", EDITOR):
            config = config_from_table({"select": [code], "ignore": [code], "severity": {code: "info"}},
                                       source=source)
            assert config.select == (code,) and config.ignore == (code,)
        pyproject(project, f'[tool.gradguard]\nselect = ["{code}"]\nignore = ["{code}"]\n')
        result, _, err = check(capsys)
        assert result == 0 and "unknown rule code" not in err, (code, err)
