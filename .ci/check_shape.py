"""CI: no module of assay/ over 400 lines, no function over 60 (issue #10's limits).

Measured with the ast module (a function's span from `def` to its last line), so that a
module growing past what one reader holds in mind fails CI rather than a review.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def main() -> int:
    root = Path(__file__).resolve().parents[1] / "assay"
    problems = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            problems.append(f"{path.relative_to(root.parent)}: {lines} lines (limit {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    problems.append(
                        f"{path.relative_to(root.parent)}:{node.lineno} {node.name}: {length} lines (limit {MAX_FUNCTION_LINES})"
                    )
    print("\n".join(problems) or "module and function sizes within limits")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
