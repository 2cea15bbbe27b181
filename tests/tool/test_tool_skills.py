from pathlib import Path

from contextfold.tool import Toolkit, load_skills, parse_front_matter


def write_skill(root: Path, folder: str, text: str) -> Path:
    path = root / folder / "SKILL.md"
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_front_matter_scalars_quotes_and_folded_blocks() -> None:
    text = (
        "---\n"
        "name: pdf-tools\n"
        "description: 'Work with PDFs: split, merge'\n"
        "notes: >\n"
        "  first line\n"
        "  second line\n"
        'title: "Quoted"\n'
        "---\n# Body\nname: not front matter\n"
    )
    assert parse_front_matter(text) == {
        "name": "pdf-tools",
        "description": "Work with PDFs: split, merge",
        "notes": "first line second line",
        "title": "Quoted",
    }


def test_text_without_front_matter_gives_nothing() -> None:
    assert parse_front_matter("# Just a title\nname: x\n") == {}


def test_skills_are_loaded_sorted_and_name_defaults_to_folder(tmp_path: Path) -> None:
    write_skill(tmp_path, "zeta", "---\ndescription: Last one.\n---\nbody")
    path = write_skill(tmp_path, "alpha", "---\nname: alpha-skill\ndescription: First.\n---\n")
    skills = load_skills(tmp_path)
    assert [(s.name, s.description) for s in skills] == [
        ("alpha-skill", "First."),
        ("zeta", "Last one."),
    ]
    assert skills[0].path == path.resolve()


def test_skill_without_description_is_skipped(tmp_path: Path) -> None:
    write_skill(tmp_path, "bare", "---\nname: bare\n---\n")
    assert load_skills(tmp_path) == []


def test_missing_skills_dir_gives_no_skills(tmp_path: Path) -> None:
    assert load_skills(tmp_path / "nope") == []


def test_toolkit_skills_prompt_lists_name_and_description(tmp_path: Path) -> None:
    write_skill(tmp_path, "git", "---\nname: git\ndescription: Commit and branch safely.\n---\n")
    toolkit = Toolkit(skills_dir=tmp_path)
    prompt = toolkit.skills_prompt()
    assert "- git: Commit and branch safely." in prompt
    assert str(tmp_path / "git" / "SKILL.md") in prompt
