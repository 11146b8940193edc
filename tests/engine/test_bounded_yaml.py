"""Task YAML is read within bounds: nesting depth, nodes after aliases, size, checked on the
event stream before anything is composed (libyaml's C composer recurses once per level)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from assay.runner.tasks import bounded_yaml
from assay.runner.tasks.file_check import check_task_file
from assay.runner.tasks.yaml_loader import TaskYamlError, check_text, load_yaml
from tests.engine.yaml_bombs import HEADER, alias_bomb, nested

REPO = Path(__file__).resolve().parents[2]


def test_a_60_kb_file_nested_30000_levels_is_refused_without_crashing_the_process(tmp_path: Path) -> None:
    # In a child interpreter: before the bound, this input killed the process (SIGSEGV in libyaml's composer).
    path = tmp_path / "deep.yaml"
    path.write_text(nested(30_000))
    assert 60_000 < path.stat().st_size < 61_000
    code = (
        "import sys; from assay.runner.tasks.yaml_loader import TaskYamlError, load_yaml\n"
        "try: load_yaml(sys.argv[1])\n"
        "except TaskYamlError as error: print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == (
        f"Task YAML {path.resolve()} nests collections deeper than 64 levels (line 5); "
        "a task file is shallow: flatten it."
    )


def test_20000_levels_are_a_user_error_not_a_recursion_error(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(nested(20_000))
    with pytest.raises(TaskYamlError, match="deeper than 64 levels") as refused:
        load_yaml(path)
    assert refused.value.line == 5


def test_a_547_byte_alias_bomb_is_refused_at_once() -> None:
    bomb = alias_bomb()
    assert len(bomb.encode()) <= 547
    started = time.monotonic()
    with pytest.raises(bounded_yaml.YamlBoundsError, match="more than 200000 values once its aliases are expanded"):
        check_text(bomb, source="Task YAML bomb.yaml")
    assert time.monotonic() - started < 10  # it cost minutes of CPU before


def test_aliases_that_expand_to_little_still_load(tmp_path: Path) -> None:
    # lm-eval's loader takes anchors and aliases; a task folder from lm-eval may use them.
    path = tmp_path / "aliases.yaml"
    path.write_text(
        HEADER + "generation_kwargs: &kwargs {until: ['Q:'], do_sample: false}\nmetadata: {kwargs: *kwargs}\n"
    )
    config = load_yaml(path)
    assert config["metadata"]["kwargs"] == {"until": ["Q:"], "do_sample": False}


def test_depth_counts_what_an_alias_repeats() -> None:
    text = "x: &x " + "[" * 40 + "]" * 40 + "\ny: " + "[" * 30 + "*x" + "]" * 30 + "\n"
    bounded_yaml.check("x: &x " + "[" * 40 + "]" * 40 + "\n", source="Task YAML x.yaml")  # alone it fits
    with pytest.raises(bounded_yaml.YamlBoundsError, match="deeper than 64 levels once its aliases are expanded"):
        bounded_yaml.check(text, source="Task YAML x.yaml")


@pytest.mark.parametrize("levels, fits", [(63, True), (64, False)])
def test_the_depth_bound_is_exact(levels: int, fits: bool) -> None:
    # The document's mapping is one level, the lists the rest.
    text = "metadata: " + "[" * levels + "]" * levels + "\n"
    if fits:
        bounded_yaml.check(text, source="Task YAML x.yaml")
    else:
        with pytest.raises(bounded_yaml.YamlBoundsError):
            bounded_yaml.check(text, source="Task YAML x.yaml")


def test_block_nesting_is_bounded_too(tmp_path: Path) -> None:
    path = tmp_path / "block.yaml"
    path.write_text(HEADER + "metadata:\n" + "- " * 10_000 + "x\n")
    with pytest.raises(TaskYamlError, match="deeper than 64 levels"):
        check_task_file(path)


def test_a_file_past_the_size_bound_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "large.yaml"
    path.write_text(HEADER + "# " + "x" * bounded_yaml.MAX_BYTES + "\n")
    with pytest.raises(TaskYamlError, match=f"holds more than {bounded_yaml.MAX_BYTES} bytes"):
        load_yaml(path)


def test_every_library_task_file_loads_through_the_bounded_loader() -> None:
    library = REPO / "tasks"
    files = sorted(library.glob("**/*.yaml"))
    assert len(files) > 50
    for path in files:
        load_yaml(path, resolve_functions=False, root=library)
        bounded_yaml.check(path.read_bytes(), source=str(path), limits=bounded_yaml.Limits(max_depth=8))
