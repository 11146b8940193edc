"""A manifest file as YAML documents that remember their lines, and the line of a field.

`assay apply --local` and `assay validate -f` read the same multi-document files that go to
`kubectl apply -f`; an error there is only useful with the line it is on. Each document is
kept both as data (what the spec parser reads) and as PyYAML's node tree (where each key
and value starts), and an error message that names a field (`spec.tasks[1]`,
`spec.resources.nodes`, `metadata.name`) is placed on that field's line: on the deepest part
of the path the document has, so a missing field points at its parent.
"""

from __future__ import annotations

import dataclasses
import re

import yaml

from assay.errors import UserError
from assay.spec.model import JSON

# A field path as the spec's error messages write it: a root, then `.key` and `[index]` parts.
_FIELD_PATH = re.compile(r"\b(?:spec|metadata|apiVersion|kind)\b(?:\.[A-Za-z_][\w-]*|\[\d+\])*")
_PART = re.compile(r"([A-Za-z_][\w-]*)|\[(\d+)\]")


@dataclasses.dataclass(frozen=True)
class Document:
    """One YAML document of a file: its data, its node tree, and its position (1-based) in the file."""

    data: JSON
    node: yaml.Node
    number: int

    def line_of(self, path: str) -> int:
        """The 1-based line of `path` (such as spec.tasks[1]), or of the deepest part of it the document has."""
        node: yaml.Node = self.node
        line = node.start_mark.line
        for key, index in _PART.findall(path):
            child = _child(node, key) if key else _item(node, int(index))
            if child is None:
                break
            node, line = child
        return line + 1

    def line_of_message(self, message: str, default: str = "spec") -> int:
        """The line of the first field path `message` names (the spec's errors name theirs), else of `default`."""
        match = _FIELD_PATH.search(message)
        return self.line_of(match.group(0) if match else default)


def _child(node: yaml.Node, key: str) -> tuple[yaml.Node, int] | None:
    """The value under `key`, and the line its key is written on."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                return value_node, key_node.start_mark.line
    return None


def _item(node: yaml.Node, index: int) -> tuple[yaml.Node, int] | None:
    if isinstance(node, yaml.SequenceNode) and index < len(node.value):
        item: yaml.Node = node.value[index]
        return item, item.start_mark.line
    return None


def read_documents(text: str, source: str) -> list[Document]:
    """Every non-empty document of `text`; a syntax error is a UserError naming `source` and its line."""
    loader = yaml.SafeLoader(text)
    documents: list[Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            data = loader.construct_document(node)
            if node is not None and data is not None:
                documents.append(Document(data=data, node=node, number=len(documents) + 1))
    except yaml.MarkedYAMLError as error:
        raise UserError(syntax_error_message(error, source)) from None
    except yaml.YAMLError as error:
        raise UserError(f"{source} is not valid YAML ({error}); fix the YAML syntax.".replace("\n", " ")) from None
    finally:
        loader.dispose()
    return documents


def syntax_error_message(error: yaml.MarkedYAMLError, source: str) -> str:
    """`source:LINE: not valid YAML: <what the parser expected>`, in one line."""
    mark = error.problem_mark or error.context_mark
    where = f"{source}:{mark.line + 1}" if mark is not None else source
    context = f" ({error.context})" if error.context else ""
    return f"{where}: not valid YAML: {error.problem}{context}; fix the YAML syntax.".replace("\n", " ")
