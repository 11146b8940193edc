"""Assembling a prompt: system text, few-shot turns and the question, as text or chat.

Reproduces lm-eval 0.4.13's `build_qa_turn` / `fewshot_context` layout, including where
delimiters go and how a chat conversation collapses to one user turn when few-shot
examples are not sent as separate turns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass
class Message:
    role: str
    content: str
    delimiter: str = ""
    """Appended when the conversation is rendered as plain text."""

    def as_chat(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}

    def as_text(self) -> str:
        return self.content + self.delimiter


def join_with_space(prefix: str | None, suffix: str | None, delimiter: str = " ") -> str:
    """Join two pieces, adding the delimiter only if neither has whitespace at the seam."""
    if not prefix:
        return suffix or ""
    if not suffix:
        return prefix
    if prefix[-1].isspace() or suffix[0].isspace():
        return prefix + suffix
    return prefix + delimiter + suffix


def needs_delimiter(prefix: str, suffix: str) -> bool:
    return prefix != "" and not (prefix[-1].isspace() or suffix[0].isspace())


def qa_turn(
    *,
    question: str,
    choices: list[str] | None = None,
    answer: Any = None,
    gen_prefix: str | None = None,
    target_delimiter: str = " ",
    fewshot_delimiter: str = "\n\n",
) -> list[Message]:
    """A user message, and the assistant's answer (few-shot) or generation prefix."""
    if not isinstance(question, str):
        raise TypeError(f"the prompt text must be a string, got {question!r}")
    has_answer = answer is not None and answer != ""
    if has_answer and not gen_prefix:
        user_delimiter = target_delimiter
    elif gen_prefix and needs_delimiter(question, gen_prefix):
        user_delimiter = target_delimiter
    else:
        user_delimiter = ""
    messages = [Message("user", question, user_delimiter)]
    if has_answer:
        if choices and isinstance(answer, int):
            text = choices[answer]
        elif isinstance(answer, list):
            text = answer[0]  # lm-eval shows the first of several targets in few-shot examples
        else:
            text = answer
        if not isinstance(text, str):
            raise TypeError(f"the few-shot answer must be a string, got {answer!r}")
        messages.append(Message("assistant", join_with_space(gen_prefix, text), fewshot_delimiter))
    elif gen_prefix:
        messages.append(Message("assistant", gen_prefix))
    return messages


def as_single_turn(messages: list[Message]) -> list[dict[str, str]]:
    """Collapse few-shot turns into one user message (keeping system and a final assistant prefix)."""
    messages = [dataclasses.replace(message) for message in messages]
    system = messages[0] if messages[0].role == "system" else None
    body = messages[1:] if system else messages
    if body[-1].role == "assistant":
        user_part, tail = body[:-1], [body[-1].as_chat()]
    else:
        user_part, tail = body, []
    user_part[-1].delimiter = ""
    merged = [{"role": "user", "content": "".join(m.as_text() for m in user_part)}] + tail
    return ([system.as_chat()] if system else []) + merged


def render_messages(
    messages: list[Message],
    *,
    chat_template: Callable[[list[dict[str, str]]], str] | None,
    fewshot_as_multiturn: bool,
) -> str:
    if chat_template is None:
        return "".join(message.as_text() for message in messages)
    chat = [m.as_chat() for m in messages] if fewshot_as_multiturn else as_single_turn(messages)
    return chat_template(chat)
