"""The shell commands of the pages read without scrolling sideways, and the pictures they draw
go under runs/ (ignored), never into the repository."""

import re
from pathlib import Path

import pytest

from graphformer.choices import ANIMATION_FORMATS, IMAGE_FORMATS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
# The pages a newcomer reads first: their commands are broken with backslashes to fit a page.
FIRST_PAGES = ["README.md", "docs/quickstart.md", "docs/howto/watch.md"]
MAX_LINE = 100  # characters: a code block wider than this scrolls on GitHub and the docs site
PICTURE = re.compile(r"(?:-o|--output)[ =](\S+)")


def shell_blocks(page: Path) -> list[str]:
    return re.findall(r"```(?:bash|sh|shell)\n(.*?)```", page.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("name", FIRST_PAGES)
def test_no_command_line_is_wider_than_a_page(name):
    lines = [line for block in shell_blocks(ROOT / name) for line in block.splitlines()]
    assert lines, f"{name} has no shell block"
    wide = [line for line in lines if len(line) > MAX_LINE]
    assert not wide, f"break these lines of {name} with a backslash: {wide}"


def documented_pictures() -> list[tuple[str, str]]:
    """(page, path) for every picture or animation a shell command of a page writes."""
    formats = tuple(IMAGE_FORMATS) + tuple(ANIMATION_FORMATS)
    found = []
    for page in PAGES:
        for block in shell_blocks(page):
            for path in PICTURE.findall(block.replace("\\\n", " ")):
                if path.lower().endswith(formats):
                    found.append((page.relative_to(ROOT).as_posix(), path))
    return found


def test_documented_commands_write_their_pictures_under_runs():
    pictures = documented_pictures()
    pages = {page for page, _ in pictures}
    assert {"README.md", "docs/quickstart.md", "docs/howto/watch.md"} <= pages  # the parser finds them
    outside = [(page, path) for page, path in pictures if not path.startswith("runs/")]
    assert not outside, f"write these under runs/ (ignored): {outside}"


def test_the_home_page_figure_is_drawn_by_the_readmes_heatmap_command():
    """make_figures.py draws the README's figure with the README's own heatmap options."""
    readme = " ".join(shell_blocks(ROOT / "README.md")).replace("\\\n", " ")
    command = re.search(r"graphformer heatmap (\S+) (.*?) -o \S+", readme)
    assert command, "the README draws its figure with graphformer heatmap"
    script = (ROOT / "docs" / "figures" / "make_figures.py").read_text(encoding="utf-8")
    call = re.search(r'main\(\["heatmap", str\(RUN\), (.*?), "-o", str\(HERE / "attention_copy.png"\)\]\)', script)
    assert call, "make_figures.py draws attention_copy.png with graphformer heatmap"
    assert re.findall(r'"([^"]+)"', call.group(1)) == command.group(2).split()


def test_the_readmes_rollout_picture_is_drawn_by_its_attend_command():
    """make_figures.py draws rollout_copy.png with the README's own graphformer attend options."""
    import ast
    import shlex

    readme = " ".join(shell_blocks(ROOT / "README.md")).replace("\\\n", " ")
    command = re.search(r"graphformer attend (\S+) (.*?) -o (\S+)", readme)
    assert command, "the README draws its rollout with graphformer attend"
    assert command.group(3).startswith(command.group(1) + "/")  # into the run's own folder, under runs/
    script = (ROOT / "docs" / "figures" / "make_figures.py").read_text(encoding="utf-8")
    options = re.search(r"^ROLLOUT = (\[.*?\])", script, re.M)
    assert options and ast.literal_eval(options.group(1)) == shlex.split(command.group(2))
    assert 'shutil.copyfile(RUN / "rollout.png", HERE / "rollout_copy.png")' in script
    assert "](docs/figures/rollout_copy.png)" in (ROOT / "README.md").read_text(encoding="utf-8")
