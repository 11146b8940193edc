"""Task YAMLs that nest deep or expand without end (alias bombs), for the bounded parse tests."""

from __future__ import annotations

HEADER = "task: nested\ndataset_path: json\noutput_type: generate_until\ntest_split: test\n"


def nested(levels: int) -> str:
    """A task file whose metadata nests `levels` lists: two bytes a level."""
    return HEADER + "metadata: " + "[" * levels + "]" * levels + "\n"


def alias_bomb() -> str:
    """Nine anchors, each a list of nine aliases of the one before: 9**9 strings once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=False):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    return HEADER + "metadata:\n" + "".join(f"  {line}\n" for line in lines)
