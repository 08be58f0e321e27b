"""Question cards (`QuestionCard`) as a Telegram message with an inline keyboard, and the buttons' data. Pure.

A button's `callback_data` is `q:<question id>:<choice>` (under Telegram's 64 bytes): the core's
unguessable id and the button's position, nothing else; the core asks the question's deciders about
whoever presses it. Every string on the card came from outside and is HTML-escaped, so markup or a
mention in a question is shown as text.
"""

from __future__ import annotations

from telegram import InlineKeyboardButton, InlineKeyboardMarkup

from gateway.outbound.adapter import QuestionCard

from .render import escape

QUESTION_PREFIX = "q:"
MAX_TEXT = 4096


def question_html(card: QuestionCard) -> str:
    head = f"❓ <b>{escape(card.asker)} {'asks' if card.open else 'asked'}</b>"
    parts = [head, f"<blockquote>{escape(card.text)}</blockquote>"]
    parts += [f"• {escape(name)}: {escape(value)}" for name, value in card.answered]
    if card.prompt:
        parts.append(f"<b>{escape(card.prompt)}</b>" + (" (reply to this chat)" if card.replies else ""))
    parts.append(f"<i>{escape(card.note or card.deciders)}</i>")
    html = "\n".join(parts)
    if len(html) > MAX_TEXT:  # only the question's text can be this long: cut it, keep the rest
        over = len(html) - MAX_TEXT + 20
        cut = escape(card.text)[: max(0, len(escape(card.text)) - over)].rsplit("&", 1)[0]
        parts[1] = f"<blockquote>{cut}…</blockquote>"
        html = "\n".join(parts)
    return html


def question_keyboard(card: QuestionCard) -> InlineKeyboardMarkup:
    """One button a row (labels come from outside and may be long); none once the question is closed."""
    return InlineKeyboardMarkup([[InlineKeyboardButton(label[:60], callback_data=f"{QUESTION_PREFIX}{card.question_id}:{choice}")]
                                 for label, choice in zip(card.choices, card.choice_ids, strict=True)])


def parse_question_data(data: str | None) -> tuple[str, int] | None:
    """(question id, choice) of a question button, or None."""
    if not data or not data.startswith(QUESTION_PREFIX):
        return None
    question_id, _, choice = data[len(QUESTION_PREFIX):].partition(":")
    return (question_id, int(choice)) if question_id and choice.isdigit() else None
