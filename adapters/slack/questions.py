"""Question cards (`QuestionCard`) as Block Kit, and the button values that come back. Pure.

A button carries `q:<question id>:<choice>`: the core's unguessable id and the button's position, nothing
a click could use to answer another question or as someone else (the core asks the question's deciders
about whoever clicks). Every string on the card came from outside, so it is escaped: a `<!channel>` or a
`<@U123>` in a question shows as text and notifies nobody.
"""

from __future__ import annotations

from typing import Any

from gateway.outbound.adapter import QuestionCard

from .render import escape

QUESTION_ACTION_PREFIX = "gw_q_"  # routed before the approval buttons' own parsing
QUESTION_PREFIX = "q:"


def question_message(card: QuestionCard) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks): the question, what is answered so far, the field asked now and its buttons."""
    head = f"{card.asker} asks" if card.open else f"{card.asker} asked"
    quoted = "\n".join(f"> {escape(line)}" for line in card.text.splitlines() or [""])
    blocks: list[dict[str, Any]] = [
        {"type": "section", "block_id": "gw_q_head", "text": {"type": "mrkdwn", "text": f":question: *{escape(head)}*\n{quoted}"[:3000]}},
    ]
    if card.answered:
        lines = "\n".join(f"• {escape(name)}: {escape(value)}" for name, value in card.answered)
        blocks.append({"type": "section", "block_id": "gw_q_answered", "text": {"type": "mrkdwn", "text": lines[:3000]}})
    if card.prompt:
        how = " (reply in this thread)" if card.replies else ""
        blocks.append({"type": "section", "block_id": "gw_q_prompt",
                       "text": {"type": "mrkdwn", "text": f"*{escape(card.prompt)}*{how}"[:3000]}})
    if card.choices:
        blocks.append({"type": "actions", "block_id": "gw_q_buttons", "elements": [
            {"type": "button", "action_id": f"{QUESTION_ACTION_PREFIX}{n}", "text": {"type": "plain_text", "text": label[:75]},
             "value": f"{QUESTION_PREFIX}{card.question_id}:{choice}"}
            for n, (label, choice) in enumerate(zip(card.choices, card.choice_ids, strict=True))]})
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": escape(card.note or card.deciders)}]})
    return f"{head}: {card.text}"[:3000], blocks


def parse_question_value(value: str) -> tuple[str, int] | None:
    """(question id, choice) of a question button, or None."""
    if not value.startswith(QUESTION_PREFIX):
        return None
    question_id, _, choice = value[len(QUESTION_PREFIX):].partition(":")
    return (question_id, int(choice)) if question_id and choice.isdigit() else None
